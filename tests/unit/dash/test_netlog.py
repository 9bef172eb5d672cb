"""Chromium's NetLog -> racing.csv rows, on excerpts of real NetLogs of dash.js over ``race`` (made here).

``race_clean.json``: Chromium 156 through a clean 5 Mbit/s link to Caddy on
10.0.3.2:8443 (tests/data/netlog; cut by keeping only the event types the
parser reads). The page and dash.js came over TCP (HTTP/2), the
``alt-svc`` of those responses started QUIC, and every later request went
over QUIC. ``race_udp_blocked.json``: the same with UDP to port 8443 dropped
by a firewall on r1: the QUIC handshake timed out, QUIC was marked broken,
TCP carried everything.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.dash.core.racing_log import RacingRow, read_racing, write_racing
from nest_experiments.dash.players import browser, netlog

DATA = Path(__file__).resolve().parents[2] / "data" / "netlog"
ORIGIN = "10.0.3.2:8443"


def clean() -> dict[str, Any]:
    return dict(json.loads((DATA / "race_clean.json").read_text()))


def first_ms(doc: dict[str, Any]) -> float:
    return float(doc["events"][0]["time"]) + float(doc["constants"]["timeTickOffset"])


def rows(doc: dict[str, Any]) -> list[RacingRow]:
    t0 = first_ms(doc) / 1000
    return netlog.racing_rows(doc, ORIGIN, to_run=lambda wall_s: wall_s - t0)


def raced(doc: dict[str, Any]) -> list[RacingRow]:
    """The rows without ``bound`` (one per request, checked on their own)."""
    return [r for r in rows(doc) if r.event != "bound"]


def test_tcp_first_then_alt_svc_starts_quic_and_quic_wins_every_later_race() -> None:
    got = raced(clean())
    kinds = [(r.event, r.protocol) for r in got]
    assert kinds[:6] == [("job_started", "tcp"), ("connected", "tcp"), ("alt_svc", ""), ("job_started", "quic"),
                         ("won", "tcp"), ("connected", "quic")]
    assert got[2].detail == "quic 10.0.3.2:8443"
    assert kinds[6:] == [("won", "quic")] * 36  # the manifest and every segment
    tcp, quic = got[1], got[5]
    assert tcp.conn_id == "tcp53" and quic.conn_id == "quic75"
    assert 0 < tcp.value < 0.1 and 0 < quic.value < 0.1  # type: ignore[operator]  # handshakes, unshaped RTT
    assert all(a.t <= b.t for a, b in zip(got, got[1:], strict=False))
    assert not [r for r in got if r.event in ("failed", "broken", "stream_error")]  # the exit's abort is no error


def test_udp_blocked_the_quic_handshake_times_out_and_quic_is_marked_broken() -> None:
    doc = json.loads((DATA / "race_udp_blocked.json").read_text())
    got = raced(doc)
    assert [(r.event, r.protocol) for r in got if r.event != "won"] == [
        ("job_started", "tcp"), ("connected", "tcp"), ("alt_svc", ""), ("job_started", "quic"), ("failed", "quic"),
        ("broken", "quic")]
    failed, broken = got[-2], got[-1]
    assert failed.detail.startswith("QUIC_NETWORK_IDLE_TIMEOUT") and 3.9 < failed.t - got[3].t < 4.5  # 4 s timeout
    assert broken.t > failed.t
    assert {r.protocol for r in got if r.event == "won"} == {"tcp"}  # every race until then went to TCP ...
    assert not [r for r in got if r.event == "won" and r.t > broken.t]  # ... and after it there was no race
    assert {p for _, p in netlog.request_protocols(doc, ORIGIN)} == {"tcp"}


def test_other_origins_are_left_out() -> None:
    doc = clean()
    assert any("google" in str(e.get("params", {}).get("url", "")) for e in doc["events"])  # Chromium's own tries
    assert netlog.racing_rows(doc, "10.0.3.2:9999", to_run=lambda s: s) == []


def _named(doc: dict[str, Any], name: str) -> list[dict[str, Any]]:
    code = doc["constants"]["logEventTypes"][name]
    return [e for e in doc["events"] if e["type"] == code]


def test_a_broken_alt_svc_a_failed_handshake_and_an_idle_timeout() -> None:
    doc = clean()
    found = _named(doc, "HTTP_STREAM_JOB_CONTROLLER_ALT_SVC_FOUND")
    found[10]["params"]["is_broken"] = True  # Chromium marked QUIC broken from here on ...
    found[20]["params"]["is_broken"] = False  # ... and took it back
    for e in found[11:20]:
        e["params"]["is_broken"] = True
    got = rows(doc)
    assert [r.event for r in got if r.event in ("broken", "recovered")] == ["broken", "recovered"]
    handshake = _named(doc, "QUIC_SESSION_CRYPTO_HANDSHAKE_COMPLETE")[0]
    failed = copy.deepcopy(doc)
    failed["events"] = [e for e in failed["events"] if e != handshake]
    closed = _named(failed, "QUIC_SESSION_CLOSED")[0]
    closed["params"]["quic_error"] = doc["constants"]["quicError"]["QUIC_HANDSHAKE_TIMEOUT"]
    [fail] = [r for r in rows(failed) if r.event == "failed"]
    assert (fail.protocol, fail.conn_id) == ("quic", "quic75") and fail.detail.startswith("QUIC_HANDSHAKE_TIMEOUT")
    idle = copy.deepcopy(doc)
    _named(idle, "QUIC_SESSION_CLOSED")[0]["params"]["quic_error"] = doc["constants"]["quicError"][netlog.IDLE_TIMEOUT]
    idle["events"] = [e for e in idle["events"] if e not in _named(idle, "QUIC_SESSION_CLOSE_ON_ERROR")]
    assert [r.event for r in rows(idle)][-1] == "idle_close"


def _add(doc: dict[str, Any], name: str, like: dict[str, Any], params: dict[str, Any], dt_ms: float = 1.0) -> None:
    """An event ``name`` (its type added to the constants) on ``like``'s source, ``dt_ms`` after it."""
    types = doc["constants"]["logEventTypes"]
    types.setdefault(name, max(types.values()) + 1)
    event = {"type": types[name], "phase": doc["constants"]["logEventPhase"]["PHASE_NONE"], "source": like["source"],
             "time": str(float(like["time"]) + dt_ms), "params": params}
    doc["events"].insert(doc["events"].index(like) + 1, event)


def test_a_cancelled_stream_a_restart_after_a_quic_error_and_a_connection_closed() -> None:
    doc = clean()
    handshake = _named(doc, "QUIC_SESSION_CRYPTO_HANDSHAKE_COMPLETE")[0]
    _add(doc, "QUIC_SESSION_RST_STREAM_FRAME_SENT", handshake, {"stream_id": 12, "quic_rst_stream_error": 6})
    _add(doc, "QUIC_SESSION_RST_STREAM_FRAME_SENT", handshake, {"stream_id": 16, "quic_rst_stream_error": 0})
    request = [e for e in _named(doc, "URL_REQUEST_START_JOB") if ORIGIN in str(e.get("params", {}).get("url"))][5]
    _add(doc, "HTTP_TRANSACTION_RESTART_AFTER_ERROR", request, {"net_error": -356})
    _add(doc, "HTTP_TRANSACTION_RESTART_AFTER_ERROR", request, {"net_error": -101})  # another error: not path B
    closed = _named(doc, "QUIC_SESSION_CLOSED")[0]
    closed["params"]["quic_error"] = doc["constants"]["quicError"]["QUIC_TOO_MANY_RTOS"]
    doc["events"] = [e for e in doc["events"] if e not in _named(doc, "QUIC_SESSION_CLOSE_ON_ERROR")]
    got = rows(doc)
    assert [(r.event, r.conn_id, r.detail) for r in got if r.event == "stream_cancelled"] == [
        ("stream_cancelled", "quic75", "QUIC_STREAM_CANCELLED on stream 12")]
    reset, restart = [r for r in got if r.event == "stream_error"]  # in the log's order
    assert (reset.conn_id, reset.detail) == ("quic75", "RST_STREAM sent: 0 on stream 16")  # not a cancel
    assert restart.protocol == "quic" and restart.detail.startswith("ERR_QUIC_PROTOCOL_ERROR before the response")
    assert [r.detail.split(":")[0] for r in got if r.event == "conn_closed"] == ["QUIC_TOO_MANY_RTOS"]


def test_every_request_is_bound_once_to_what_carried_it() -> None:
    doc = clean()
    bound = [r for r in rows(doc) if r.event == "bound"]
    assert [(r.detail.rsplit("/", 1)[1].split("?")[0], r.protocol) for r in bound] == [
        (url.rsplit("/", 1)[1].split("?")[0], p) for url, p in netlog.request_protocols(doc, ORIGIN)]
    assert {r.conn_id for r in bound if r.protocol == "quic"} == {"quic75"}  # the one QUIC session
    assert all(r.conn_id.startswith("job") for r in bound if r.protocol == "tcp")


def test_the_rows_survive_the_racing_csv(tmp_path: Path) -> None:
    got = rows(clean())
    write_racing(tmp_path / "racing.csv", got)
    back = read_racing(tmp_path / "racing.csv")
    assert [(r.event, r.protocol, r.conn_id, r.detail) for r in back] == [
        (r.event, r.protocol, r.conn_id, r.detail) for r in got]


def test_request_protocols() -> None:
    requests = netlog.request_protocols(clean(), ORIGIN)
    assert [(url.rsplit("/", 1)[1].split("?")[0], p) for url, p in requests[:3]] == [
        ("nest_dashjs.html", "tcp"), ("dash.all.min.js", "tcp"), ("manifest.mpd", "quic")]
    assert [p for _, p in requests[2:]] == ["quic"] * (len(requests) - 2) and len(requests) == 38


def test_race_discovers_quic_and_allows_our_root_for_the_host_only() -> None:
    argv = browser.chromium_argv("chromium", profile=Path("/tmp/p"), transport="race", server="10.0.1.2", port=8443,
                                 spki=["abc="], netlog=None)
    assert "--enable-quic" in argv and "--ignore-certificate-errors-spki-list=abc=" in argv
    forced = [a for a in argv if a.startswith("--origin-to-force-quic-on=")]
    assert forced == [f"--origin-to-force-quic-on=10.0.1.2:{browser.UNKNOWN_ROOT_PORT}"]  # not the origin's port
    assert browser.page_url(transport="race", server="10.0.1.2", port=8443, page="/p.html", abr="bola",
                            max_buffer_s=10).startswith("https://10.0.1.2:8443/")


# ---- Chromium 156 behind the 64 kbit/s UDP:8443 shaper (issue 29, docs/racing_chromium_mechanism.md §6):
# ``shaper_chromium156.json``: experiments/racing_chromium.toml's shaper condition (2 Mbit/s, UDP shaped with a
# 10-packet queue), 120 s; ``shaper_queue400_chromium156.json``: racing_chromium_queue.toml (the same with a
# 400-packet queue). Real NetLogs of host runs (2026-11-26), cut to the event types the parser reads (and
# STOP_SENDING); ``*.page.json``: dash.js's fragment and quality events of the same sessions (wall ms).

SHAPER_ORIGIN = "10.0.0.1:8443"


def _shaper(name: str) -> tuple[dict[str, Any], list[RacingRow], list[dict[str, Any]], float]:
    doc = json.loads((DATA / f"{name}.json").read_text())
    page = json.loads((DATA / f"{name}.page.json").read_text())["events"]
    t0 = first_ms(doc) / 1000
    return doc, netlog.racing_rows(doc, SHAPER_ORIGIN, to_run=lambda wall_s: wall_s - t0), page, t0


@pytest.mark.parametrize("name", ["shaper_chromium156", "shaper_queue400_chromium156"])
def test_behind_the_shaper_one_quic_session_carries_everything_and_a_cancel_marks_nothing(name: str) -> None:
    doc, got, page, t0 = _shaper(name)
    [quic] = [r.conn_id for r in got if r.event == "job_started" and r.protocol == "quic"]  # one QUIC session
    assert [r.conn_id for r in got if r.event == "connected" and r.protocol == "quic"] == [quic]
    assert not [r for r in got if r.event in ("broken", "failed", "idle_close", "conn_closed", "stream_error")]
    bound = [r for r in got if r.event == "bound"]
    assert [r.protocol for r in bound[:2]] == ["tcp", "tcp"]  # the page and dash.js, before alt-svc was known
    assert {(r.protocol, r.conn_id) for r in bound[2:]} == {("quic", quic)} and len(bound) >= 30  # every later one
    # dash.js's AbandonRequestsRule fired once, at the start (quality 3 -> 0); Chromium reset that stream
    # (QUIC_STREAM_CANCELLED) within 2 ms and sent the next request on the same session
    [abandoned] = [e for e in page if e["type"] == "fragment_abandoned"]
    t_abandon = abandoned["t"] / 1000 - t0
    cancels = [r for r in got if r.event == "stream_cancelled"]
    first = cancels[0]
    assert first.conn_id == quic and abs(first.t - t_abandon) < 0.005
    assert first.detail == "QUIC_STREAM_CANCELLED (HTTP/3 0x10c) on stream 16"
    assert [r.t > first.t for r in bound if r.conn_id == quic].count(True) >= 20
    # the server's RESET_STREAM is quic-go's answer to the cancel (STOP_SENDING), not an error
    [reset] = [r for r in got if r.event == "stream_reset"]
    assert reset.detail.endswith("on stream 16 (after our cancel of it)") and reset.t > first.t
    # the other cancels and the one CONNECTION_CLOSE are the browser's exit (ERR_ABORTED), after 120 s
    assert all(r.t > 120 for r in cancels[1:]) and len(cancels) == 3
    [close] = [r for r in got if r.event == "close_frame"]
    assert close.t > 120 and close.detail == "sent: QUIC_CONNECTION_CANCELLED: net error"
    # no main-job delay was logged: every later request found the open QUIC session
    assert not [r for r in got if r.event in ("job_delayed", "job_resumed")]
    assert doc["polledData"]["quicInfo"]["retry_without_alt_svc_on_quic_errors"] is True
    assert doc["constants"]["activeFieldTrialGroups"] == []  # Debian's build: no field trial changed the QUIC params


def test_a_retransmitted_reset_is_one_cancel() -> None:
    _, got, _, _ = _shaper("shaper_queue400_chromium156")
    doc = json.loads((DATA / "shaper_queue400_chromium156.json").read_text())
    sent = _named(doc, "QUIC_SESSION_RST_STREAM_FRAME_SENT")
    assert [e["params"]["stream_id"] for e in sent[:2]] == [16, 16]  # the frame went twice (RTT ~3.4 s) ...
    assert [r.detail.split()[-1] for r in got if r.event == "stream_cancelled"][:2] == ["16", "108"]  # ... one cancel


def test_a_delayed_main_job_and_a_received_connection_close() -> None:
    # not in these runs (every later request found the QUIC session; nothing closed it): injected into the real log
    doc, _, _, _ = _shaper("shaper_chromium156")
    controller = [e for e in _named(doc, "HTTP_STREAM_JOB_CONTROLLER")
                  if SHAPER_ORIGIN in str((e.get("params") or {}).get("url"))][5]
    _add(doc, "HTTP_STREAM_JOB_DELAYED", controller, {"delay": 450})  # JobController::ResumeMainJobLater
    _add(doc, "HTTP_STREAM_JOB_RESUMED", _named(doc, "HTTP_STREAM_JOB_DELAYED")[0], {"delay": 450}, dt_ms=450)
    handshake = _named(doc, "QUIC_SESSION_CRYPTO_HANDSHAKE_COMPLETE")[0]
    rtos = doc["constants"]["quicError"]["QUIC_TOO_MANY_RTOS"]
    _add(doc, "QUIC_SESSION_CONNECTION_CLOSE_FRAME_RECEIVED", handshake, {"quic_error": rtos, "details": "5 RTOs"})
    t0 = first_ms(doc) / 1000
    got = netlog.racing_rows(doc, SHAPER_ORIGIN, to_run=lambda wall_s: wall_s - t0)
    delayed, resumed = [r for r in got if r.event in ("job_delayed", "job_resumed")]
    assert (delayed.protocol, delayed.value, resumed.event) == ("tcp", 0.45, "job_resumed")
    assert 0.44 < resumed.t - delayed.t < 0.46
    assert [r.detail for r in got if r.event == "close_frame"][0] == "received: QUIC_TOO_MANY_RTOS: 5 RTOs"


# ---- Ten minutes at 1:1 time (docs/racing_chromium_mechanism.md §8.1): ``dvl_1to1_600s_chromium156.json``, the
# NetLog of experiments/racing_chromium_long.toml's session (dash.js in Chromium 156, the DVL pattern at 1:1 time
# and the 64 kbit/s UDP:8443 shaper, 605 s; a host run of 2026-11-27), cut as the shaper's above.


def test_ten_minutes_at_one_to_one_time_one_idle_close_then_quic_again_and_nothing_marked_broken() -> None:
    doc = json.loads((DATA / "dvl_1to1_600s_chromium156.json").read_text())
    t0 = first_ms(doc) / 1000
    got = netlog.racing_rows(doc, SHAPER_ORIGIN, to_run=lambda wall_s: wall_s - t0)
    first, second = [r.conn_id for r in got if r.event == "job_started" and r.protocol == "quic"]
    # the first race's session idled out while the page's script came over HTTP/2 through DVL (the player had not
    # asked for anything yet): QUIC's 29 s idle timeout, the only connection error of the 605 s
    [idle] = [r for r in got if r.event == "idle_close"]
    assert idle.conn_id == first and idle.detail.endswith("Timeout:29s") and 75 < idle.t < 85
    assert not [r for r in got if r.event in ("broken", "failed", "conn_closed", "stream_error", "job_delayed")]
    # the player's first request (the MPD) raced again, QUIC won, and that session carried every later request
    bound = [r for r in got if r.event == "bound"]
    assert [r.protocol for r in bound[:2]] == ["tcp", "tcp"]  # the page and dash.js
    assert {(r.protocol, r.conn_id) for r in bound[2:]} == {("quic", second)} and len(bound) >= 100
    assert bound[2].detail == "/manifest.mpd" and bound[2].t > idle.t
    [close] = [r for r in got if r.event == "close_frame"]
    assert close.t > 600 and close.detail == "sent: QUIC_CONNECTION_CANCELLED: net error"  # the browser's exit
    types = {v: k for k, v in doc["constants"]["logEventTypes"].items()}
    found = [e["params"]["is_broken"] for e in doc["events"] if types[e["type"]] == "HTTP_STREAM_JOB_CONTROLLER_ALT_SVC_FOUND"]
    assert len(found) > 100 and not any(found)  # an idle close marks nothing (§1)
    assert not [e for e in doc["events"] if types[e["type"]] == "HTTP_TRANSACTION_RESTART_AFTER_ERROR"]
