"""The racing policies as pure state machines: a fake clock (``now``) and fake connect results."""

from __future__ import annotations

import math

import pytest

from nest_experiments.dash.racing import Plan, Racer, RacingParams, h3_port, params_from

ALT = 'h3=":443"; ma=86400'


def racer(policy: str, **params: float) -> Racer:
    r = Racer(policy=policy, params=RacingParams(**params))  # type: ignore[arg-type]
    r.on_alt_svc(0.0, ALT)
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


def test_chromium_main_job_delay_zero_until_quic_worked_then_from_its_rtt_capped() -> None:
    r = racer("chromium")
    assert r.plan(1.0) == Plan(quic=True, tcp_delay_s=0.0)  # QUIC not known to work here yet: a plain race
    r.on_connected(1.1, "quic", "quic-1", 0.1)
    assert r.plan(2.0).tcp_delay_s == pytest.approx(0.15)  # 1.5 x srtt
    r.on_connected(3.0, "quic", "quic-2", 2.5)
    assert r.plan(4.0).tcp_delay_s == 3.0  # kMaxDelayTimeForMainJobSecs
    r.on_connected(5.0, "quic", "quic-3", 0.0)
    assert r.plan(6.0).tcp_delay_s == 0.3  # no RTT to go by: kDefaultRTT


def test_chromium_no_main_job_delay_while_quic_was_recently_broken() -> None:
    r = racer("chromium", broken_initial_s=10.0)
    r.on_connected(1.0, "quic", "quic-1", 0.1)
    r.on_stream_error(2.0, "quic", "quic-1", "timed out")
    assert r.plan(12.0) == Plan(quic=True, tcp_delay_s=0.0)  # back-off over, but recently broken
    r.on_connected(12.1, "quic", "quic-2", 0.2)  # confirmed again
    assert r.plan(13.0).tcp_delay_s == pytest.approx(0.3)


def test_chromium_broken_exponential_backoff_and_recovery() -> None:
    r = racer("chromium", broken_initial_s=300.0)
    r.on_job_failed(10.0, "quic", "quic-1", "handshake timeout")
    assert [row.value for row in r.rows if row.event == "backoff"] == [300.0]
    assert not r.quic_usable(309.9) and r.plan(309.9) == Plan(quic=False, tcp_delay_s=0.0)
    assert r.quic_usable(310.0)  # expired: QUIC tried again
    r.on_stream_error(320.0, "quic", "quic-2", "timed out")  # too many RTOs
    assert [row.value for row in r.rows if row.event == "backoff"] == [300.0, 600.0]
    assert not r.quic_usable(919.9) and r.quic_usable(920.0)
    r.on_connected(921.0, "quic", "quic-3", 0.05)  # confirmed: the count restarts
    assert events(r, "recovered") == [(921.0, "")]
    r.on_job_failed(950.0, "quic", "quic-4", "reset")
    assert [row.value for row in r.rows if row.event == "backoff"][-1] == 300.0


def test_chromium_backoff_shift_is_capped() -> None:
    r = racer("chromium", broken_initial_s=1.0, broken_max_shift=3)
    t = 0.0
    for _ in range(6):
        r.on_job_failed(t, "quic", "q", "x")
        t += 1000.0
        assert r.quic_usable(t)
    assert [row.value for row in r.rows if row.event == "backoff"] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_chromium_second_error_while_broken_does_not_extend() -> None:
    r = racer("chromium")
    r.on_stream_error(1.0, "quic", "quic-1", "a")
    r.on_stream_error(1.5, "quic", "quic-1", "b")  # the audio request on the same dead connection
    assert len(events(r, "broken")) == 1


def test_tcp_failures_never_mark_quic() -> None:
    r = racer("chromium")
    r.on_job_failed(1.0, "tcp", "tcp-1", "refused")
    r.on_stream_error(2.0, "tcp", "tcp-1", "reset")
    assert not events(r, "broken") and r.quic_usable(2.0)


def test_firefox_backup_after_100ms_and_excluded_until_restart() -> None:
    r = racer("firefox")
    assert r.plan(0.5) == Plan(quic=True, tcp_delay_s=0.1)
    r.on_job_failed(1.0, "quic", "quic-1", "handshake timeout")
    assert events(r, "broken") == [(1.0, "excluded until restart: handshake timeout")]
    assert not events(r, "backoff")
    assert not r.quic_usable(1e9) and r.plan(1e9) == Plan(quic=False, tcp_delay_s=0.0)


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
    r = racer("dynamic", min_probes=3)
    feed(r, [0.5, 0.5], [0.1, 0.1])
    r.on_job_failed(30.0, "quic", "quic-1", "handshake timeout")
    assert events(r, "decision") == [(30.0, "race (too few probes)")]
    assert events(r, "broken") and r.plan(31.0) == Plan(quic=False, tcp_delay_s=0.0)


def test_dynamic_similar_rtts_no_racing_quic_only_and_broken_cleared() -> None:
    # the poor network (DVL): both protocols queue behind the same bottleneck
    r = racer("dynamic", min_probes=3)
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
    r.on_stream_error(70.0, "quic", "quic-1", "timed out")
    decision = [row for row in r.rows if row.event == "decision"][-1]
    assert decision.detail == "race" and decision.value == pytest.approx(10.0 / 0.05)
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
    r.on_stream_error(21.0, "quic", "q", "x")
    assert r.racing_allowed is True and events(r, "broken")


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
    with pytest.raises(ValueError, match="racing policy 'edge'"):
        Racer(policy="edge")
    with pytest.raises(ValueError, match="idle_timeout_s: must not be negative"):
        RacingParams(idle_timeout_s=-1)
    with pytest.raises(ValueError, match="min_probes"):
        RacingParams(min_probes=11, probe_window=10)
    with pytest.raises(ValueError, match="idle_timeout: unknown racing parameter"):
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
