"""dash.http.recovery: aioquic's own recovery events of a real QUIC connection (two aioquic connections in memory,
every datagram handed across by the test, a share of the server's dropped), as quic.csv rows; and quic-go's qlog
(parsers.qlog) as the same rows."""

from __future__ import annotations

import csv
import itertools
import json
import ssl
from datetime import datetime
from pathlib import Path

import pytest
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

from nest_experiments.dash.http import recovery
from nest_experiments.dash.origin import certs
from nest_experiments.errors import RunError
from nest_experiments.parsers import qlog
from nest_experiments.rundir.rows import QUIC_FIELDS

CLIENT_ADDR, SERVER_ADDR = ("10.0.0.1", 40000), ("10.0.0.2", 4433)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def transfer(tmp_path: Path, *, drop_every: int, nbytes: int = 400_000) -> list[dict[str, str]]:
    """The server sends ``nbytes`` on one stream; every ``drop_every``-th server datagram is lost (0: none).
    Returns the server's quic.csv rows."""
    files = certs.write_certs(tmp_path, ["10.0.0.2"])
    clock = Clock()
    sink = recovery.RecoverySink(tmp_path / "quic.csv", side="server", t0=0.0)
    sink.now = clock  # type: ignore[method-assign]  # the test's clock: 5 ms per datagram exchange
    server_cfg = QuicConfiguration(is_client=False, alpn_protocols=["t"], quic_logger=recovery.recovery_logger(sink))
    server_cfg.load_cert_chain(files.chain, files.key)
    client_cfg = QuicConfiguration(is_client=True, alpn_protocols=["t"], verify_mode=ssl.CERT_NONE,
                                   server_name="10.0.0.2")
    client = QuicConnection(configuration=client_cfg)
    client.connect(SERVER_ADDR, now=clock.t)
    server: QuicConnection | None = None
    sent, stream = 0, None
    for _ in range(20_000):
        clock.t += 0.005
        for data, _addr in client.datagrams_to_send(now=clock.t):
            if server is None:
                server = QuicConnection(configuration=server_cfg,
                                        original_destination_connection_id=client._original_destination_connection_id)
                recovery.bind(server, "h3-1")
            server.receive_datagram(data, CLIENT_ADDR, now=clock.t)
        if server is None:
            continue
        if stream is None and server._handshake_complete:
            stream = server.get_next_available_stream_id(is_unidirectional=True)
            server.send_stream_data(stream, b"x" * nbytes, end_stream=True)
        for data, _addr in server.datagrams_to_send(now=clock.t):
            sent += 1
            if not (drop_every and sent % drop_every == 0):
                client.receive_datagram(data, SERVER_ADDR, now=clock.t)
        for conn in (client, server):
            timer = conn.get_timer()
            if timer is not None and timer <= clock.t:
                conn.handle_timer(now=clock.t)
        if stream is not None and not server._loss.bytes_in_flight and clock.t > 1.0:
            break
    sink.close()
    with (tmp_path / "quic.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_lossy_transfer_gives_thinned_metrics_and_every_lost_packet_on_the_run_clock(tmp_path: Path) -> None:
    rows = transfer(tmp_path, drop_every=25)
    assert list(rows[0]) == list(QUIC_FIELDS)
    metrics = [r for r in rows if r["event"] == "metrics"]
    lost = [r for r in rows if r["event"] == "lost"]
    assert {r["side"] for r in rows} == {"server"} and {r["conn"] for r in rows} == {"h3-1"}  # bind named them
    assert len(lost) >= 5 and [int(r["lost_total"]) for r in lost] == list(range(1, len(lost) + 1))
    times = [float(r["t"]) for r in metrics]
    assert all(b - a >= recovery.MIN_GAP_S - 1e-9 for a, b in itertools.pairwise(times))  # thinned to 20 per second
    cwnd = [int(r["cwnd"]) for r in metrics]
    assert cwnd[0] == 12000 and min(cwnd) < 0.8 * 12000  # aioquic's initial 10 x 1200 bytes, cut after the losses
    rtts = [float(r["smoothed_rtt_ms"]) for r in metrics if r["smoothed_rtt_ms"]]
    assert rtts and all(5.0 <= x <= 50.0 for x in rtts)  # datagrams cross in 5 ms steps of the test's clock
    assert not (tmp_path / "quic.csv.partial").exists()


def test_without_loss_no_lost_row_and_the_window_grows(tmp_path: Path) -> None:
    rows = transfer(tmp_path, drop_every=0)
    assert rows and not [r for r in rows if r["event"] == "lost"]
    assert max(int(r["cwnd"]) for r in rows) > 10 * 12000  # slow start, uncut (measured: 12000 -> 329012)
    assert {r["pto_count"] for r in rows} <= {"0", ""}


def _sqlog(events: list[dict[str, object]], *, wall: str = "2026-12-03T15:00:00.123456789Z") -> bytes:
    """A quic-go qlog (JSON-SEQ) as quic-go v0.65 writes it: the header, then one record per event."""
    header = {"file_schema": "urn:ietf:params:qlog:file:sequential", "trace": {
        "vantage_point": {"type": "server"}, "common_fields": {
            "group_id": "a1b2c3d4e5f60718293a", "reference_time": {
                "clock_type": "monotonic", "epoch": "unknown", "wall_clock_time": wall}}}}
    return b"".join(b"\x1e" + json.dumps(r).encode() + b"\n" for r in [header, *events])


def test_quic_gos_qlog_gives_the_same_rows_on_the_run_clock() -> None:
    """quic-go's recovery events (Caddy's qlog, the fetcher's): metrics thinned to 20/s per connection, every lost
    packet, the PTO count carried, the packet events skipped, times on the run clock (wall clock at t = 0 given)."""
    metrics = {"min_rtt": 20.5, "smoothed_rtt": 25.0, "latest_rtt": 24.0, "rtt_variance": 3.0,
               "congestion_window": 30000, "bytes_in_flight": 12000, "packets_in_flight": 9}
    events = [{"time": 1.0, "name": "transport:packet_sent", "data": {"header": {"packet_number": 1}}},
              {"time": 10.0, "name": "recovery:metrics_updated", "data": metrics},
              {"time": 30.0, "name": "recovery:metrics_updated", "data": {**metrics, "congestion_window": 31000}},
              {"time": 40.0, "name": "recovery:metrics_updated", "data": {"pto_count": 1}},
              {"time": 45.0, "name": "recovery:packet_lost", "data": {"header": {"packet_type": "1RTT",
                                                                                 "packet_number": 7},
                                                                      "trigger": "time_threshold"}},
              {"time": 120.0, "name": "recovery:metrics_updated", "data": {**metrics, "congestion_window": 15000}}]
    ref = datetime.fromisoformat("2026-12-03T15:00:00.123456+00:00").timestamp()
    rows = qlog.recovery_rows(_sqlog(events), wall_t0=ref - 2.0)  # the trace began 2 s into the run
    assert [(r["event"], r["cwnd"], r["t"]) for r in rows] == [("metrics", 30000, 2.01), ("lost", None, 2.045),
                                                              ("metrics", 15000, 2.12)]  # 30 ms: thinned
    assert [r["lost_total"] for r in rows] == [0, 1, 1] and [r["pto_count"] for r in rows] == [0, 1, 1]
    assert rows[1]["packet_number"] == 7 and rows[0]["smoothed_rtt_ms"] == 25.0 and rows[0]["ssthresh"] is None
    assert {r["side"] for r in rows} == {"server"} and {r["conn"] for r in rows} == {"a1b2c3d4e5f60718"}
    assert set(rows[0]) == set(QUIC_FIELDS)
    cut = _sqlog(events)[:-20]  # killed while writing its last record: that record is dropped
    assert len(qlog.recovery_rows(cut, wall_t0=ref, side="client")) == 2
    assert qlog.recovery_rows(b"", wall_t0=ref) == []
    with pytest.raises(RunError, match="record 3: not JSON"):
        qlog.recovery_rows(_sqlog(events).replace(b'"recovery:metrics_updated", "data": {"min_rtt"',
                                                  b'"recovery:metrics_updated", "data": {min_rtt', 1), wall_t0=ref)
