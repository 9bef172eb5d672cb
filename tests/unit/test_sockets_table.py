"""net.sockets.listening_ports: the kernel's socket tables (/proc/net/tcp, udp, and their IPv6 twins), parsed."""

from __future__ import annotations

import socket
from pathlib import Path

from nest_experiments.net.sockets import LISTEN_STATE, listening_ports


def test_a_listening_tcp_and_a_bound_udp_socket_are_found_a_connected_one_is_not() -> None:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    udp6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    other = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        udp6.bind(("::1", 0))
        other.bind(("127.0.0.1", 0))  # bound, not listening
        tables = {name: Path("/proc/self/net", name).read_text() for name in ("tcp", "tcp6", "udp", "udp6")}
        assert tcp.getsockname()[1] in listening_ports(tables["tcp"], LISTEN_STATE["tcp"])
        assert other.getsockname()[1] not in listening_ports(tables["tcp"], LISTEN_STATE["tcp"])
        assert udp6.getsockname()[1] in listening_ports(tables["udp6"], LISTEN_STATE["udp"])
        assert udp6.getsockname()[1] not in listening_ports(tables["udp"], LISTEN_STATE["udp"])
    finally:
        for s in (tcp, udp6, other):
            s.close()


def test_the_header_line_and_short_lines_are_skipped() -> None:
    table = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
             "   0: 0100007F:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n"
             "   1: 0100007F:1452 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2\n"
             "garbage\n")
    assert listening_ports(table, "0A") == {0x1451}
