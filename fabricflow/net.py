"""Network address helpers shared by the services and the dev tools."""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback", "udp_socket_table"]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); a host name other than localhost is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def udp_socket_table():
    """The columns of each UDP socket's line in /proc/net/udp and /proc/net/udp6 (Linux; nothing elsewhere):
    ``[1]`` local address:port (hex), ``[4]`` tx_queue:rx_queue (hex), ``[9]`` inode, ``[12]`` drops."""
    for name in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(name) as f:
                next(f)
                rows = [cols for cols in (line.split() for line in f) if len(cols) >= 13]
        except OSError:
            continue
        yield from rows
