"""``ss -tinH`` parser on real output (MPTCP subflow and plain TCP sockets, this machine's ss)."""

from __future__ import annotations

from pathlib import Path

from nest_experiments.parsers.ss import tcp_sockets

DATA = Path(__file__).resolve().parents[1] / "data" / "ss"


def test_mptcp_subflow_counters_and_flag() -> None:
    (sock,) = tcp_sockets((DATA / "mptcp_subflow.txt").read_text())
    assert (sock["local"], sock["local_port"], sock["remote"], sock["remote_port"]) == ("127.0.0.1", 42576,
                                                                                         "127.0.0.1", 47123)
    assert sock["bytes_received"] == 300000 and sock["bytes_sent"] == 1000 and sock["bytes_acked"] == 1001
    assert sock["mptcp"] is True and sock["rtt_ms"] == 0.04


def test_plain_tcp_socket_has_no_mptcp_flag_and_zero_for_absent_counters() -> None:
    (sock,) = tcp_sockets((DATA / "tcp.txt").read_text())
    assert sock["bytes_received"] == 5000 and sock["bytes_sent"] == 0 and sock["mptcp"] is False


def test_several_sockets_and_state_column_and_ipv6() -> None:
    text = ("ESTAB 0 0 10.0.2.1:40000 10.0.7.2:8443\n\t cubic bytes_received:10 tcp-ulp-mptcp flags:Jj\n"
            "ESTAB 0 0 [fd00::1]:40001 [fd00::2]:8443\n\t cubic bytes_received:20\n"
            "LISTEN 0 128 *:8443 *:*\n")
    socks = tcp_sockets(text)
    assert [(s["local"], s["bytes_received"], s["mptcp"]) for s in socks] == [("10.0.2.1", 10, True),
                                                                           ("fd00::1", 20, False)]


def test_subflows_bound_to_a_device_are_parsed() -> None:
    """Real output (host kernel, multi-homed dumbbell): ``addr%dev:port`` for subflows from a ``dev`` endpoint."""
    socks = tcp_sockets((DATA / "mptcp_two_paths.txt").read_text())
    assert [(s["local"], s["remote"], s["bytes_received"], s["mptcp"]) for s in socks] == [
        ("10.0.8.2", "10.0.1.1", 0, True), ("10.0.7.2", "10.0.1.1", 2259432, True),
        ("10.0.8.2", "10.0.2.1", 2281984, True)]
