"""ingest/pcapwrite.py: what ingest.capture_path writes reads back through ingest/pcapread.py with the same bytes,
addresses and millisecond receive times, and stops at its size bound."""

from __future__ import annotations

from ingest.pcapread import read_udp
from ingest.pcapwrite import PcapWriter


def test_round_trip_keeps_payload_source_port_and_the_millisecond(tmp_path):
    p = tmp_path / "c.pcap"
    rows = [(1_764_600_000_123, "10.0.255.1", 6343, b"\x00\x00\x00\x05abc", 40000),
            (1_764_600_000_999, "2001:db8::7", 2055, b"\x00\x09xyz", 51000),
            (1_764_600_001_000, "::ffff:10.0.0.9", 6344, b'{"job":"a"}', 1)]
    with PcapWriter(str(p)) as w:
        for r in rows:
            assert w.write(*r)
    got = list(read_udp(str(p)))
    assert [int(round(g.timestamp_s * 1000)) for g in got] == [r[0] for r in rows]
    assert [g.payload for g in got] == [r[3] for r in rows]
    assert [(g.src_ip, g.src_port, g.dst_port) for g in got] == [("10.0.255.1", 40000, 6343),
                                                                  ("2001:db8::7", 51000, 2055), ("10.0.0.9", 1, 6344)]


def test_it_stops_at_its_size_bound(tmp_path):
    p = tmp_path / "c.pcap"
    w = PcapWriter(str(p), max_bytes=300)
    written = sum(w.write(1_764_600_000_000 + i, "10.0.0.1", 6343, b"x" * 50) for i in range(10))
    w.close()
    assert 0 < written < 10 and w.full and p.stat().st_size <= 300
    assert len(list(read_udp(str(p)))) == written
