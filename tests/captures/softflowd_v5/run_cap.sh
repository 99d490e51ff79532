#!/bin/sh
# usage: run_cap.sh OUT.pcap PORT -- exporter command...
set -e
OUT=$1; PORT=$2; shift 3
ip link set lo up
python3 /tmp/cap/sink.py $PORT &
SINK=$!
tcpdump -i lo -n -s 0 -B 32768 -U -w "$OUT" "udp and dst host 127.0.0.1 and dst port $PORT" 2>/tmp/cap/tcpdump_$PORT.err &
TD=$!
sleep 1
"$@"
wait $SINK
sleep 0.5
kill $TD; wait $TD || true
cat /tmp/cap/tcpdump_$PORT.err
