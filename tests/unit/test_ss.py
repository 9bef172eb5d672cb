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


def test_congestion_state_of_a_socket_is_read_from_its_tcp_info_line() -> None:
    (sock,) = tcp_sockets((DATA / "mptcp_subflow.txt").read_text())  # real: bbr on loopback
    assert (sock["cwnd"], sock["rtt_ms"], sock["rttvar_ms"]) == (11, 0.04, 0.022)
    assert sock["pacing_rate_bps"] == 166344733208 and sock["delivery_rate_bps"] == 26214400000
    assert sock["ssthresh"] is None  # still infinite: ss leaves it out
    assert (sock["retrans_total"], sock["lost"], sock["ecn"], sock["ecnseen"]) == (0, 0, False, False)  # unprinted
    syn = tcp_sockets((DATA / "mptcp_two_paths.txt").read_text())[0]  # real: a SYN retransmitted once, lost
    assert (syn["cwnd"], syn["ssthresh"], syn["retrans_total"], syn["lost"], syn["unacked"]) == (1, 7, 1, 1, 1)
    # ss.c's order: option words before the congestion control; 'bytes_retrans:' and 'rcv_rtt:' are not matched
    line = ("ESTAB 0 0 10.0.2.1:40000 10.0.7.2:8443\n\t ts sack ecn ecnseen cubic wscale:7,7 rto:204 "
            "rtt:30.5/2.25 cwnd:24 ssthresh:20 bytes_retrans:2896 pacing_rate 9600000bps delivery_rate 4712345bps "
            "retrans:0/2 rcv_rtt:99 tcp-ulp-mptcp flags:Mmecv\n")
    (ecn,) = tcp_sockets(line)
    assert (ecn["ecn"], ecn["ecnseen"], ecn["retrans_total"], ecn["bytes_retrans"]) == (True, True, 2, 2896)
    assert (ecn["rtt_ms"], ecn["rttvar_ms"], ecn["cwnd"], ecn["ssthresh"]) == (30.5, 2.25, 24, 20)
    (plain,) = tcp_sockets(line.replace("ecn ecnseen ", ""))  # 'Mmecv' (MPTCP's flags) is not the ecn word
    assert plain["ecn"] is False and plain["ecnseen"] is False
