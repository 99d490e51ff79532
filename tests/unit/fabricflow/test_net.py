"""fabricflow.net: loopback test and the /proc/net/udp* socket table."""

from __future__ import annotations

import os
import socket
import sys

import pytest

from fabricflow.net import is_loopback, udp_socket_table
from ingest.listener import socket_drops


@pytest.mark.parametrize("host, expect", [
    ("localhost", True), ("127.0.0.2", True), ("::1", True), ("10.0.0.1", False), ("example.org", False),
])
def test_is_loopback(host, expect):
    assert is_loopback(host) is expect


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/net/udp is Linux")
def test_a_bound_socket_has_its_row_with_port_inode_and_drops():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        inode = str(os.fstat(s.fileno()).st_ino)
        rows = [cols for cols in udp_socket_table() if cols[9] == inode]
        assert len(rows) == 1
        assert int(rows[0][1].rsplit(":", 1)[1], 16) == port
        assert socket_drops(s) == int(rows[0][12]) == 0
    assert not any(cols[9] == inode for cols in udp_socket_table())
