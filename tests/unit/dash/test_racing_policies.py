"""The racing policies as pure state machines: a fake clock (``now``) and fake connect results."""

from __future__ import annotations

import math

import pytest

from nest_experiments.dash.core.racing import (
    Plan,
    QuicSample,
    QuicWatch,
    Racer,
    RacingParams,
    blackhole_delay,
    h3_port,
    params_from,
)
from nest_experiments.errors import ConfigError

ALT = 'h3=":443"; ma=86400'


def racer(policy: str, **params: float) -> Racer:
    r = Racer(policy=policy, params=RacingParams(**params))  # type: ignore[arg-type]
    r.on_alt_svc(0.0, ALT)
    return r


def validated(policy: str) -> Racer:
    """``racer`` whose QUIC connection came up (for ``firefox``: the alternative is validated)."""
    r = racer(policy)
    r.on_connected(0.0, "quic", "quic-1", 0.0)
    return r


def events(r: Racer, name: str) -> list[tuple[float, str]]:
    return [(row.t, row.detail) for row in r.rows if row.event == name]


def test_before_alt_svc_every_policy_but_none_uses_tcp() -> None:
    for policy in ("chromium", "firefox", "quic_only", "dynamic", "tcp_only"):
        r = Racer(policy=policy)
        assert r.plan(0.0) == Plan(quic=False, tcp_delay_s=0.0)
        assert r.tcp_allowed()


def test_alt_svc_learnt_once_and_only_h3_on_the_same_host() -> None:
    r = Racer(policy="chromium")
    r.on_alt_svc(1.0, 'h2=":443"')
    assert not r.alt_svc
    r.on_alt_svc(2.0, 'h3="other.example:443"')
    assert not r.alt_svc
    r.on_alt_svc(3.0, ALT)
    r.on_alt_svc(4.0, 'h3=":8443"')
    assert events(r, "alt_svc") == [(3.0, ALT)]


@pytest.mark.parametrize(("header", "port"), [
    ('h3=":443"; ma=86400', 443), ('h3-29=":1", h3=":8443"', 8443), ("h3=:443", 443), ('h3=":0"', None),
    ('h3=":x"', None), ("clear", None), ('h2=":443"', None),
])
def test_h3_port(header: str, port: int | None) -> None:
    assert h3_port(header) == port


def backoffs(r: Racer) -> list[float | None]:
    return [row.value for row in r.rows if row.event == "backoff"]


def with_tcp(r: Racer, t: float = 0.5) -> Racer:
    """The MPD came over TCP: an HTTP/2 connection is open (the main job of a race succeeds at once)."""
    r.on_connected(t, "tcp", "tcp-1", 0.01)
    return r


def test_chromium_main_job_delay_zero_until_quic_worked_then_from_the_last_sessions_srtt_capped() -> None:
    r = racer("chromium")
    assert r.plan(1.0) == Plan(quic=True, tcp_delay_s=0.0)  # QUIC not known to work here yet: a plain race
    assert r.plan(1.0, tcp_open=True) == Plan(quic=True, tcp_delay_s=0.0)  # the first race after alt-svc: TCP wins
    r.on_connected(1.1, "quic", "quic-1", 0.5)  # known to work; the handshake time is no srtt
    assert r.main_job_delay() == 0.3  # no session went away yet: kDefaultRTT
    r.on_conn_closed(3.0, "quic", "quic-1", "QUIC_NETWORK_IDLE_TIMEOUT", srtt_s=0.1)  # ServerNetworkStats
    assert r.main_job_delay() == pytest.approx(0.15)  # 1.5 x the closed session's srtt
    r.on_idle_close(5.0, "quic", "quic-2", 29.0, srtt_s=2.5)
    assert r.main_job_delay() == 3.0  # kMaxDelayTimeForMainJobSecs
    # with the server's crypto config from that handshake a new session serves in 0-RTT: no TCP job at all,
    # also with an HTTP/2 session open (the main job is never resumed)
    assert r.zero_rtt() and r.plan(6.0) == r.plan(6.0, tcp_open=True) == Plan(quic=True, tcp_delay_s=None)
    # a 0-RTT QUIC job that fails with no TCP connection open: the next race is an ordinary one, with the delay
    r.on_job_failed(16.0, "quic", "quic-3", "no QUIC handshake within 10 s")
    assert not r.zero_rtt() and r.plan(17.0) == Plan(quic=True, tcp_delay_s=3.0)
    r.on_connected(20.0, "tcp", "tcp-1", 0.05)  # its TCP job succeeded: path A marks QUIC broken
    assert events(r, "broken") and r.plan(21.0) == Plan(quic=False, tcp_delay_s=0.0)


def test_chromium_zero_rtt_job_failing_with_an_http2_session_open_marks_broken_and_goes_to_tcp() -> None:
    r = with_tcp(racer("chromium"))
    r.on_connected(1.0, "quic", "quic-1", 0.05)
    r.on_idle_close(31.0, "quic", "quic-1", 29.0, srtt_s=0.05)
    assert r.plan(40.0, tcp_open=True) == Plan(quic=True, tcp_delay_s=None)  # 0-RTT: the request goes on QUIC
    r.on_job_failed(50.0, "quic", "quic-2", "no QUIC handshake within 10 s")  # the retry over the open TCP
    assert [d for _, d in events(r, "broken")] == ["no QUIC handshake within 10 s (QUIC job failed, TCP job succeeded)"]
    assert r.plan(50.0, tcp_open=True) == Plan(quic=False, tcp_delay_s=0.0)
    assert not r.zero_rtt()  # recently broken: require_confirmation, no 0-RTT until a session confirms QUIC


def test_chromium_no_main_job_delay_while_quic_was_recently_broken_until_a_session_confirms_it() -> None:
    r = with_tcp(racer("chromium", broken_initial_s=10.0))
    r.on_connected(1.0, "quic", "quic-1", 0.1)
    r.on_idle_close(2.0, "quic", "quic-1", 29.0, srtt_s=0.2)
    r.on_job_failed(3.0, "quic", "quic-2", "handshake timeout")  # path A: broken 10 s
    assert not r.quic_usable(12.9) and r.quic_usable(13.0)
    assert r.plan(13.0) == Plan(quic=True, tcp_delay_s=0.0)  # back-off over, but recently broken
    r.on_connected(13.1, "quic", "quic-3", 0.2)  # connecting confirms nothing
    assert r.plan(14.0).tcp_delay_s == 0.0 and not events(r, "recovered")
    r.on_conn_closed(50.0, "quic", "quic-3", "QUIC_TOO_MANY_RTOS", srtt_s=0.4)  # a confirmed session went away
    assert events(r, "recovered") == [(50.0, "confirmed: a QUIC session went away")]
    assert r.main_job_delay() == pytest.approx(0.6) and r.plan(51.0) == Plan(quic=True, tcp_delay_s=None)  # 0-RTT


def test_chromium_path_a_a_failed_quic_job_marks_broken_only_once_the_tcp_job_succeeded() -> None:
    r = racer("chromium")
    r.on_job_failed(1.0, "quic", "quic-1", "handshake timeout")  # no TCP connection yet: nothing to report
    assert not events(r, "broken") and r.quic_usable(1.0)
    r.on_connected(1.2, "tcp", "tcp-1", 0.2)  # the main job succeeded: brokenness reported now
    assert events(r, "broken") == [(1.2, "handshake timeout (QUIC job failed, TCP job succeeded)")]
    assert backoffs(r) == [300.0] and not r.quic_usable(300.0) and r.quic_usable(301.2)
    # "No brokenness to report if the main job fails"
    r2 = racer("chromium")
    r2.on_job_failed(1.0, "quic", "quic-1", "handshake timeout")
    r2.on_job_failed(2.0, "tcp", "tcp-1", "refused")
    r2.on_connected(9.0, "tcp", "tcp-2", 0.1)  # a later race's TCP job: not the one that raced the failed QUIC job
    assert not events(r2, "broken")


def test_chromium_orphaned_quic_job_failing_after_tcp_won_marks_broken() -> None:
    r = with_tcp(racer("chromium"))
    r.on_job_started(1.0, "quic", "quic-1")  # TCP served at once; the QUIC job goes on
    r.on_job_failed(11.0, "quic", "quic-1", "no QUIC handshake within 10 s")
    assert [d for _, d in events(r, "broken")] == ["no QUIC handshake within 10 s (QUIC job failed, TCP job succeeded)"]


def test_chromium_path_b_error_before_headers_retries_over_tcp_and_marks_when_the_retry_completes() -> None:
    r = with_tcp(racer("chromium"))
    r.on_connected(1.0, "quic", "quic-1", 0.05)
    assert r.on_stream_error(5.0, "quic", "quic-1", "stream reset by the server", headers=False) is True
    assert not events(r, "broken") and r.quic_usable(5.0)  # not at the error
    r.on_tcp_retry_done(5.3, "quic-1", "stream reset by the server")
    assert events(r, "broken") == [(5.3, "stream reset by the server (QUIC error before the headers, "
                                         "the TCP retry succeeded)")]
    assert backoffs(r) == [300.0] and not r.quic_usable(6.0)


def test_chromium_error_after_headers_is_no_retry_and_marks_nothing() -> None:
    r = with_tcp(racer("chromium"))
    for t in (5.0, 6.0, 7.0):
        assert r.on_stream_error(t, "quic", "quic-1", "QUIC connection closed", headers=True) is False
    assert not events(r, "broken") and r.quic_usable(8.0)
    assert [d for _, d in events(r, "stream_error")][0] == "QUIC connection closed (after the response headers)"


def test_chromium_player_cancels_never_mark_quic_broken() -> None:
    r = with_tcp(racer("chromium", request_timeout_s=9.0, stream_timeout_s=5.0))
    r.on_connected(1.0, "quic", "quic-1", 0.05)
    for i in range(20):  # the request_timeout / stream_timeout of a slow path, again and again
        r.on_stream_cancelled(10.0 + 10 * i, "quic-1", "not complete after 9 s (request_timeout)")
        assert r.quic_usable(10.0 + 10 * i) and r.tcp_allowed()
    assert not events(r, "broken") and not events(r, "backoff") and len(events(r, "stream_cancelled")) == 20
    assert r.plan(300.0, tcp_open=True) == Plan(quic=True, tcp_delay_s=None)  # nothing changed: still 0-RTT


def test_chromium_connection_closed_by_a_detector_marks_nothing_and_confirms_quic() -> None:
    r = with_tcp(racer("chromium"))
    r.on_connected(1.0, "quic", "quic-1", 0.05)
    r.on_conn_closed(40.0, "quic", "quic-1", "QUIC_TOO_MANY_RTOS: no new ACK for 6.6 s", srtt_s=0.05)
    r.on_conn_closed(70.0, "quic", "quic-2", "QUIC_NETWORK_IDLE_TIMEOUT: no packet received for 29.0 s")
    assert not events(r, "broken") and r.quic_usable(70.0)
    assert [(row.event, row.value) for row in r.rows if row.event == "conn_closed"] == [
        ("conn_closed", 0.05), ("conn_closed", None)]
    assert r.srtt_s == 0.05  # a close without an srtt keeps the last one


def test_chromium_session_going_away_while_marked_broken_confirms_nothing() -> None:
    r = with_tcp(racer("chromium"))
    r.on_job_failed(1.0, "quic", "quic-1", "handshake timeout")
    r.on_conn_closed(2.0, "quic", "quic-0", "QUIC_NETWORK_IDLE_TIMEOUT", srtt_s=0.3)  # an older session
    assert not events(r, "recovered") and not r.quic_usable(2.0) and r.srtt_s is None


def test_chromium_broken_exponential_backoff_restarts_when_a_session_confirms_quic() -> None:
    r = with_tcp(racer("chromium", broken_initial_s=300.0))
    r.on_job_failed(10.0, "quic", "quic-1", "handshake timeout")
    assert backoffs(r) == [300.0]
    assert not r.quic_usable(309.9) and r.plan(309.9) == Plan(quic=False, tcp_delay_s=0.0)
    assert r.quic_usable(310.0)  # expired: QUIC tried again
    r.on_connected(311.0, "quic", "quic-2", 0.05)
    assert r.on_stream_error(320.0, "quic", "quic-2", "QUIC connection closed", headers=False)
    r.on_tcp_retry_done(320.5, "quic-2", "QUIC connection closed")
    assert backoffs(r) == [300.0, 600.0]  # connecting did not confirm QUIC: the count went on
    assert not r.quic_usable(920.4) and r.quic_usable(920.5)
    r.on_idle_close(1000.0, "quic", "quic-3", 29.0, srtt_s=0.05)  # a session went away: confirmed
    assert events(r, "recovered") == [(1000.0, "confirmed: a QUIC session went away")]
    r.on_job_failed(1050.0, "quic", "quic-4", "reset")
    assert backoffs(r)[-1] == 300.0


def test_chromium_backoff_is_capped_at_the_max_delay() -> None:
    r = with_tcp(racer("chromium", broken_initial_s=1.0, broken_max_delay_s=8.0))
    t = 0.0
    for _ in range(6):
        r.on_job_failed(t, "quic", "q", "x")
        t += 1000.0
        assert r.quic_usable(t)
    assert backoffs(r) == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    default = with_tcp(racer("chromium"))
    for i in range(12):
        default.on_job_failed(1e7 * i, "quic", "q", "x")
    assert backoffs(default)[:3] == [300.0, 600.0, 1200.0] and backoffs(default)[-1] == 2 * 86400.0  # 2 days


def test_chromium_second_failure_while_broken_does_not_extend() -> None:
    r = with_tcp(racer("chromium"))
    r.on_job_failed(1.0, "quic", "quic-1", "a")
    r.on_tcp_retry_done(1.5, "quic-1", "b")  # the audio request on the same dead connection
    assert len(events(r, "broken")) == 1


def test_tcp_failures_never_mark_quic() -> None:
    r = with_tcp(racer("chromium"))
    r.on_job_failed(1.0, "tcp", "tcp-1", "refused")
    assert r.on_stream_error(2.0, "tcp", "tcp-1", "reset") is False
    assert not events(r, "broken") and r.quic_usable(2.0)


def test_blackhole_delay_is_quiches_two_tlps_and_five_doubling_rtos() -> None:
    # clean path (srtt 50 ms): 2 x max(0.1, 0.075 + 0.1) + 31 x max(0.05 + 0.04, 0.2) = 0.35 + 6.2
    assert blackhole_delay(0.05, 0.01, 5) == pytest.approx(6.55)
    assert blackhole_delay(0.05, 0.01, 5, multiple_in_flight=True) == pytest.approx(2 * 0.1 + 6.2)
    # behind the 64 kbit/s shaper (srtt 1.2 s, rttvar 0.3 s): 2 x 2.4 + 31 x 2.4 = 79.2 s
    assert blackhole_delay(1.2, 0.3, 5) == pytest.approx(79.2)
    # no RTT sample: kInitialRttMs for the TLPs, kDefaultRetransmissionTimeMs for the RTOs
    assert blackhole_delay(None, 0.0, 5) == pytest.approx(2 * 0.25 + 31 * 0.5)
    assert blackhole_delay(0.05, 0.01, 2) == pytest.approx(0.35 + 3 * 0.2)


def sample(last_rx: float, in_flight: int, acked: int, srtt: float = 0.05) -> QuicSample:
    return QuicSample(last_rx=last_rx, bytes_in_flight=in_flight, acked=acked, srtt_s=srtt, rttvar_s=0.01)


def test_quic_watch_idle_timeout_after_29_s_without_a_received_packet() -> None:
    w = QuicWatch(params=RacingParams())
    assert w.check(28.9, sample(0.0, 0, 0)) == ""
    assert w.check(29.0, sample(0.0, 0, 0)).startswith("QUIC_NETWORK_IDLE_TIMEOUT: no packet received for 29.0 s")
    assert w.check(40.0, sample(20.0, 0, 0)) == ""  # a packet at 20 s re-armed it


def test_quic_watch_too_many_rtos_needs_packets_in_flight_and_no_new_ack() -> None:
    w = QuicWatch(params=RacingParams())
    assert w.check(0.0, sample(0.0, 1200, 7)) == ""  # a request in flight: armed (6.55 s at srtt 50 ms)
    assert w.check(6.0, sample(5.9, 1200, 7)) == ""  # data keeps arriving, but nothing we sent is acked
    assert w.check(6.6, sample(6.5, 1200, 7)).startswith("QUIC_TOO_MANY_RTOS: no new ACK for 6.6 s (5 RTOs")
    w = QuicWatch(params=RacingParams())
    for t in range(0, 60, 5):  # an ACK of something new every 5 s: re-armed each time, never fires
        assert w.check(float(t), sample(float(t), 1200, t)) == ""
    w = QuicWatch(params=RacingParams())
    for t in range(0, 28):  # nothing in flight (only ACKs sent): not armed, however long nothing is acked
        assert w.check(float(t), sample(float(t), 0, 7)) == ""
    w = QuicWatch(params=RacingParams())  # behind the shaper: srtt 1.2 s -> ~79 s
    assert w.check(0.0, sample(0.0, 1200, 1, srtt=1.2)) == "" and w.check(28.0, sample(27.9, 1200, 1, 1.2)) == ""


def test_quic_watch_pings_after_15_s_of_silence_once_per_period() -> None:
    w = QuicWatch(params=RacingParams())
    assert not w.ping_due(14.9, 0.0) and w.ping_due(15.0, 0.0)
    assert not w.ping_due(20.0, 0.0) and w.ping_due(30.0, 0.0)
    assert not w.ping_due(40.0, 39.0)


def test_firefox_keeps_to_the_origins_route_until_a_quic_connection_validates_the_alternative() -> None:
    # AltSvcCache::UpdateAltServiceMapping validates an https alternative by connecting to it (a speculative
    # connect); GetAltServiceMapping hands out validated mappings only (netwerk/protocol/http/AlternateServices.cpp)
    r = racer("firefox")
    assert r.validating(0.1) and r.plan(0.1, tcp_open=True) == Plan(quic=False, tcp_delay_s=0.0)
    assert r.plan(0.1) == Plan(quic=False, tcp_delay_s=0.0)  # no TCP connection open: a TCP job, nothing waits
    r.on_connected(0.3, "quic", "quic-1", 0.25)
    assert not r.validating(0.4) and r.plan(0.4, tcp_open=True) == Plan(quic=True, tcp_delay_s=0.1)
    f = racer("firefox")  # a validation that fails excludes HTTP/3: nothing validates any more
    f.on_job_failed(3.0, "quic", "quic-1", "handshake timeout")
    assert not f.validating(3.1) and f.plan(3.1) == Plan(quic=False, tcp_delay_s=0.0)
    assert not racer("chromium").validating(0.1) and not Racer(policy="firefox").validating(0.1)  # no alt-svc yet


def test_firefox_backup_after_100ms_and_excluded_until_restart() -> None:
    r = racer("firefox")
    r.on_connected(0.2, "quic", "quic-1", 0.1)  # validated; a request that finds no QUIC connection open:
    assert r.plan(0.5) == Plan(quic=True, tcp_delay_s=0.1)
    r.on_job_failed(1.0, "quic", "quic-1", "handshake timeout")
    assert events(r, "broken") == [(1.0, "excluded until restart: handshake timeout")]
    assert not events(r, "backoff")
    assert not r.quic_usable(1e9) and r.plan(1e9) == Plan(quic=False, tcp_delay_s=0.0)


def test_firefox_a_cancelled_quic_request_keeps_quic_and_a_failed_one_excludes_it() -> None:
    # Firefox ESR 153 behind the 64 kbit/s UDP shaper kept HTTP/3 after dash.js abandoned a request (racing_firefox,
    # session 17): a cancel resets the stream (Http3Session::CloseStream), only Http3Session::Shutdown excludes
    r = validated("firefox")
    r.on_stream_cancelled(1.0, "quic-1", "abandoned by the player")
    assert events(r, "stream_cancelled") == [(1.0, "abandoned by the player")] and not events(r, "broken")
    assert r.quic_usable(2.0) and r.plan(2.0).quic
    f = validated("firefox")  # the peer closed the connection with an error code: Http3Session::Shutdown excludes
    assert f.on_stream_error(1.0, "quic", "quic-1", "QUIC connection closed (code 1)", cause="error") is False
    assert not f.quic_usable(2.0) and events(f, "broken") == [(1.0, "excluded until restart: QUIC connection "
                                                                    "closed (code 1)")]


@pytest.mark.parametrize(("cause", "headers", "retry"), [
    ("reset", False, True),  # ResetOrStopSendingRecvd -> NS_ERROR_NET_RESET -> Restart on the direct route (TCP)
    ("reset", True, False),  # after the response began: the request fails, the player asks again
    ("closed", False, False),  # an idle timeout or NO_ERROR: NET_TIMEOUT / NET_RESET, no exclusion
    ("closed", True, False),
])
def test_firefox_a_reset_stream_or_a_quiet_close_keeps_quic(cause: str, headers: bool, retry: bool) -> None:
    f = validated("firefox")
    assert f.on_stream_error(1.0, "quic", "quic-1", "x", headers=headers, cause=cause) is retry
    assert not events(f, "broken") and f.quic_usable(2.0) and f.plan(2.0).quic
    f.on_tcp_retry_done(3.0, "quic-1", "x")  # the TCP retry of that one request marks nothing either
    assert not events(f, "broken") and f.quic_usable(4.0)


def test_chromium_retries_any_quic_error_before_the_headers_over_tcp_whatever_its_cause() -> None:
    for cause in ("reset", "error", "closed"):
        r = racer("chromium")
        assert r.on_stream_error(5.0, "quic", "quic-1", "x", headers=False, cause=cause) is True
        assert r.on_stream_error(6.0, "quic", "quic-1", "x", headers=True, cause=cause) is False


def test_stalls_where_tcp_is_not_allowed_keep_waiting_and_make_dynamic_decide() -> None:
    q = racer("quic_only")
    assert q.on_stream_stalled(1.0, "quic-1", "without a byte for 5 s (stream_timeout)") is True
    assert events(q, "stream_error") == [(1.0, "stream without a byte for 5 s (stream_timeout): kept waiting "
                                               "(TCP not allowed)")]
    d = racer("dynamic", min_probes=1, probe_window=1)
    feed(d, [0.1], [0.1])
    d.on_probe_round(1.0)
    assert not d.tcp_allowed()  # decided: QUIC only
    feed(d, [5.0], [0.1], t0=20.0)
    assert d.on_stream_stalled(21.0, "quic-1", "x") is False  # the stall made it decide again: racing
    assert [x for _, x in events(d, "decision")] == ["quic_only", "race"] and not events(d, "broken")


def test_quic_only_never_falls_back_nor_marks_broken() -> None:
    r = racer("quic_only")
    for t in (1.0, 2.0, 3.0):
        r.on_job_failed(t, "quic", "q", "handshake timeout")
        r.on_stream_error(t, "quic", "q", "timed out")
        assert r.plan(t) == Plan(quic=True, tcp_delay_s=None)
        assert not r.tcp_allowed()
    assert not events(r, "broken")


def test_tcp_only_ignores_alt_svc() -> None:
    r = racer("tcp_only")
    assert r.plan(1.0) == Plan(quic=False, tcp_delay_s=0.0) and not r.quic_usable(1.0) and r.tcp_allowed()


def test_dynamic_probes_every_interval_once_quic_is_known() -> None:
    r = Racer(policy="dynamic")
    assert not r.probe_due(0.0)  # no alternative yet
    r.on_alt_svc(1.0, ALT)
    assert r.probe_due(1.0) and not r.probe_due(15.9) and r.probe_due(16.0)
    assert not racer("chromium").probe_due(100.0)


def feed(r: Racer, quic: list[float], tcp: list[float], t0: float = 0.0) -> None:
    for i, (q, t) in enumerate(zip(quic, tcp, strict=True)):
        r.on_probe(t0 + 15 * i, "quic", q)
        r.on_probe(t0 + 15 * i, "tcp", t)


def test_dynamic_behaves_as_chromium_until_enough_probes() -> None:
    r = with_tcp(racer("dynamic", min_probes=3))
    feed(r, [0.5, 0.5], [0.1, 0.1])
    r.on_job_failed(30.0, "quic", "quic-1", "handshake timeout")
    assert events(r, "decision") == [(30.0, "race (too few probes)")]
    assert events(r, "broken") and r.plan(31.0) == Plan(quic=False, tcp_delay_s=0.0)


def test_dynamic_similar_rtts_no_racing_quic_only_and_broken_cleared() -> None:
    # the poor network (DVL): both protocols queue behind the same bottleneck
    r = with_tcp(racer("dynamic", min_probes=3))
    feed(r, [0.2], [0.2])
    r.on_job_failed(5.0, "quic", "quic-1", "handshake timeout")  # too few probes: chromium: broken
    assert r.plan(6.0).quic is False
    feed(r, [2.0, 2.5, 3.0], [1.8, 2.6, 2.9], t0=15.0)
    r.on_stream_error(60.0, "quic", "quic-2", "timed out")
    decision = [row for row in r.rows if row.event == "decision"][-1]
    assert decision.detail == "quic_only" and decision.value == pytest.approx(2.25 / 2.2)  # medians of the window
    assert r.racing_allowed is False and not r.tcp_allowed()
    assert r.plan(61.0) == Plan(quic=True, tcp_delay_s=None)
    assert events(r, "recovered") == [(60.0, "racing not allowed: QUIC only")]
    assert len(events(r, "broken")) == 1  # the second error marked nothing


def test_dynamic_quic_much_slower_allows_racing() -> None:
    # the UDP rate-limiting firewall: QUIC's RTT >= 3x TCP's
    r = racer("dynamic", min_probes=3, rtt_ratio=3.0)
    feed(r, [0.9, 10.0, 10.0, 10.0], [0.05, 0.05, 0.06, 0.05])
    assert r.on_stream_error(70.0, "quic", "quic-1", "QUIC connection closed") is True  # racing: path B
    decision = [row for row in r.rows if row.event == "decision"][-1]
    assert decision.detail == "race" and decision.value == pytest.approx(10.0 / 0.05)
    assert not events(r, "broken")
    r.on_tcp_retry_done(70.5, "quic-1", "QUIC connection closed")
    assert events(r, "broken") and r.plan(71.0) == Plan(quic=False, tcp_delay_s=0.0)


def test_dynamic_ratio_threshold_is_inclusive_and_uses_the_last_window() -> None:
    r = racer("dynamic", min_probes=2, probe_window=2, rtt_ratio=2.0)
    feed(r, [100.0, 100.0, 0.5, 0.5], [0.25, 0.25, 0.25, 0.25])  # the old 100 s probes left the window
    assert r.rtt_ratio() == 2.0
    r.on_stream_error(1.0, "quic", "q", "x")
    assert r.racing_allowed is True


def test_dynamic_decision_can_turn_back_to_racing() -> None:
    r = racer("dynamic", min_probes=1, probe_window=1)
    feed(r, [0.1], [0.1])
    r.on_stream_error(1.0, "quic", "q", "x")
    assert r.racing_allowed is False
    feed(r, [5.0], [0.1], t0=20.0)
    r.on_stream_cancelled(21.0, "q", "x (request_timeout)")  # a player timeout is the paper's trigger too
    assert r.racing_allowed is True and not events(r, "broken")  # and racing as chromium: a cancel marks nothing


def test_zero_tcp_rtt_gives_an_infinite_ratio() -> None:
    r = racer("dynamic", min_probes=1)
    feed(r, [0.1], [0.0])
    assert math.isinf(r.rtt_ratio() or 0.0)


def test_rows_carry_protocols_and_values() -> None:
    r = racer("chromium")
    r.on_job_started(1.0, "quic", "quic-1")
    r.on_connected(1.05, "quic", "quic-1", 0.05)
    r.on_won(1.05, "quic", "quic-1")
    r.on_idle_close(40.0, "tcp", "tcp-1", 29.5)
    got = [(row.event, row.protocol, row.conn_id, row.value) for row in r.rows[1:]]
    assert got == [("job_started", "quic", "quic-1", None), ("connected", "quic", "quic-1", 0.05),
                   ("won", "quic", "quic-1", None), ("idle_close", "tcp", "tcp-1", 29.5)]


def test_unknown_policy_and_bad_params() -> None:
    with pytest.raises(ConfigError, match="racing policy 'edge'"):
        Racer(policy="edge")
    with pytest.raises(ConfigError, match="idle_timeout_s: must not be negative"):
        RacingParams(idle_timeout_s=-1)
    with pytest.raises(ConfigError, match="min_probes"):
        RacingParams(min_probes=11, probe_window=10)
    with pytest.raises(ConfigError, match="idle_timeout: unknown racing parameter"):
        params_from({"idle_timeout": 29})
    assert params_from({"probe_window": 5.0, "min_probes": 2}).probe_window == 5


def test_dynamic_decides_after_each_probe_round_and_logs_changes_only() -> None:
    # behind a queueing UDP shaper QUIC keeps delivering (no stream error), so the probe rounds must decide
    r = racer("dynamic", min_probes=2, probe_window=2, rtt_ratio=3.0)
    r.on_alt_svc(0.0, 'h3=":8443"')
    r.on_probe(1.0, "quic", 1.5), r.on_probe(1.0, "tcp", 0.01)
    r.on_probe_round(1.0)
    assert r.racing_allowed is None and not events(r, "decision")  # one probe each: too few, no decision
    for t in (16.0, 31.0):
        r.on_probe(t, "quic", 1.4), r.on_probe(t, "tcp", 0.01)
        r.on_probe_round(t)
    assert r.racing_allowed is True and [d for _, d in events(r, "decision")] == ["race"]  # logged once
    for t in (46.0, 61.0):
        r.on_probe(t, "quic", 0.02), r.on_probe(t, "tcp", 0.01)
        r.on_probe_round(t)
    assert r.racing_allowed is False and [d for _, d in events(r, "decision")] == ["race", "quic_only"]
    assert not r.tcp_allowed()


def test_probe_rounds_decide_nothing_for_other_policies() -> None:
    r = racer("chromium", min_probes=1)
    r.on_probe(1.0, "quic", 5.0), r.on_probe(1.0, "tcp", 0.01)
    r.on_probe_round(1.0)
    assert r.racing_allowed is None and not events(r, "decision")
