"""The sFlow drop-notification seed datagrams of tests/fixtures/sflow_discards/, built from the spec's layout.

``python -m tests.support.discard_seeds`` rewrites the files; ``test_sflow_discards`` checks the
stored files equal what this builds and decode as expected (no exporter that sends drop notifications is
packaged for Debian, so these stand in for a capture: tests/fixtures/sflow_discards/README.md).
"""

from __future__ import annotations

from pathlib import Path

from devtools import sflow_build as b

DIR = Path(__file__).resolve().parents[1] / "fixtures" / "sflow_discards"


def seeds() -> dict[str, bytes]:
    """File name -> datagram."""
    roce = b.eth(b.ipv4(b.udp(49152, 4791, b.bth(0x0A, 77)), 17, "10.1.0.5", "10.1.0.9", tos=2, total_len=4136),
                 0x0800, [(0x8100, 30)])
    cnp6 = b.eth(b.ipv6(b.udp(49153, 4791, b.bth(0x81, 12)), 17, "fd00::5", "fd00::9"), 0x86DD)
    return {
        "buffer_drop_roce_v4.bin": b.datagram([
            b.discard_sample([b.raw_header(roce), b.egress_queue(3), b.ext_switch(30, 3, 30, 3)], seq=1,
                             source_index=11, drops=0, in_if=11, out_if=12, reason=259),
        ], agent="10.254.0.3", seq=101),
        "acl_drop_sampled_v6_expanded_source.bin": b.datagram([
            b.discard_sample([b.sampled_ipv6(120, 6, "fd00::1", "fd00::2", 40000, 22, 0x02)], seq=7,
                             source_type=0, source_index=70000, drops=2, in_if=70000, out_if=0, reason=258),
        ], agent="2001:db8::3", sub_agent=1, seq=9),
        "mixed_flow_counter_discards.bin": b.datagram([
            b.flow_sample([b.raw_header(b.tcp_frame())], rate=1000, pool=5000, in_if=11, out_if=12),
            b.discard_sample([b.raw_header(cnp6), b.record(1038, b"\x00\x00\x00\x0bkfree_skb\x00")], seq=2,
                             source_index=12, in_if=0, out_if=12, reason=287),
            b.counter_sample([b.generic_counters(if_index=12, if_speed=400_000_000_000, out_discards=9)]),
            b.discard_sample([], seq=3, source_index=12, reason=4242),
        ], agent="10.254.0.4", seq=5),
    }


if __name__ == "__main__":
    DIR.mkdir(parents=True, exist_ok=True)
    for name, data in seeds().items():
        (DIR / name).write_bytes(data)
