#!/bin/sh
# Capture softflowd bidirectional IPFIX (-b) on loopback; softflowd 1.1.0 reading a file (-r) blocks in accept()
# on its control socket between 1024-packet chunks, so softflowctl is polled until the file is read, then shutdown.
set -e
PORT=31105; OUT=/tmp/pg/softflowd_ipfix_biflow.pcap
timeout 60 python3 -c "
import socket,time
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(('127.0.0.1',$PORT));s.settimeout(0.5);n=0;end=time.time()+30
while time.time()<end:
    try: s.recv(65535); n+=1
    except socket.timeout: pass
print('sink datagrams',n)" &
SINK=$!
tcpdump -i lo -n -s 0 -B 32768 -U -w "$OUT" "udp and dst host 127.0.0.1 and dst port $PORT" 2>/tmp/pg/tcpdump.err &
TD=$!
sleep 1
softflowd -d -r t.pcap -n 127.0.0.1:$PORT -p /tmp/pg/sf.pid -c /tmp/pg/sf.ctl -a -v 10 -b -t maxlife=30 -m 1024 &
SF=$!
sleep 1
for i in $(seq 1 20); do softflowctl -c /tmp/pg/sf.ctl statistics | grep -q "Packets processed: 5771" && break; sleep 0.3; done
softflowctl -c /tmp/pg/sf.ctl shutdown
wait $SF || true
wait $SINK
sleep 0.5
kill $TD; wait $TD || true
cat /tmp/pg/tcpdump.err
