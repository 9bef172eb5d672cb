"""collectors.subflows: rows from both ends of a connection name the same path, and say whose end they are."""

from __future__ import annotations

from nest_experiments.collectors.subflows import CLIENT, FIELDS, SERVER, SubflowSampler

CLIENT_OUT = "ESTAB 0 0 10.0.7.2:59578 10.0.1.1:9000\n\t cubic rtt:0.11/0.055 cwnd:10 bytes_received:2259432\n"
SERVER_OUT = ("ESTAB 0 0 10.0.1.1:9000 10.0.7.2:59578\n\t ts sack ecn cubic rtt:42.5/3.1 cwnd:31 ssthresh:22 "
              "bytes_sent:2300000 bytes_acked:2259433 pacing_rate 7300000bps delivery_rate 4900000bps retrans:0/3\n")


def sampler(server_ns: str | None) -> SubflowSampler:
    return SubflowSampler(app="dash", ns="nsc", port=9000, link_of={"10.0.1.1": "s1_r2", "10.0.7.2": "h1_r1"},
                          clock=lambda: 0.0, server_ns=server_ns)


def test_a_server_row_names_the_path_by_its_local_address_and_carries_the_senders_state() -> None:
    s = sampler("nss")
    assert [side for side, _ in s.argvs] == [CLIENT, SERVER]
    assert s.argvs[0][1][-3:] == ["dport", "=", ":9000"] and s.argvs[1][1][-3:] == ["sport", "=", ":9000"]
    (client,) = s.rows_of(CLIENT, 1.0, CLIENT_OUT)
    (server,) = s.rows_of(SERVER, 1.0, SERVER_OUT)
    assert (client["link"], client["client_link"]) == (server["link"], server["client_link"]) == ("s1_r2", "h1_r1")
    assert (server["side"], server["cwnd"], server["rtt_ms"], server["retrans_total"], server["ecn"]) == \
        (SERVER, 31, 42.5, 3, True)
    assert set(server) <= set(FIELDS) and set(client) <= set(FIELDS)


def test_without_a_server_namespace_only_the_clients_end_is_read() -> None:
    assert [side for side, _ in sampler(None).argvs] == [CLIENT]
