"""ABR algorithms: scenario tables with expected choices."""

from __future__ import annotations

import itertools

import pytest

from nest_experiments.dash.core.abr import registry
from nest_experiments.dash.core.abr.base import AbrAlgorithm, Decision, PlayerState, Sample
from nest_experiments.dash.core.abr.bola import Bola
from nest_experiments.dash.core.abr.dashjs import BolaLadder, DashJs, _BolaState
from nest_experiments.dash.core.abr.dynamic import Dynamic
from nest_experiments.dash.core.abr.mpc import Mpc
from nest_experiments.dash.core.abr.registry import create_abr
from nest_experiments.dash.core.abr.throughput import ThroughputEstimator
from nest_experiments.errors import ConfigError

LADDER = (200_000, 400_000, 600_000, 800_000, 1_000_000, 1_500_000, 2_500_000, 4_000_000)  # ABR paper, Table I
TOP = len(LADDER) - 1
SEG = 4.0


def samples(*rates_bps: float, level: int = 3, latency: float = 0.0, t0: float = 0.0) -> tuple[Sample, ...]:
    """Segments of LADDER[level] x SEG downloaded at the given rates (first to last byte)."""
    out, t = [], t0
    for rate in rates_bps:
        size = int(LADDER[level] * SEG / 8)
        dl = 8 * size / rate
        out.append(Sample(level=level, bytes=size, t_request=t, t_first_byte=t + latency, t_last_byte=t + latency + dl))
        t += latency + dl
    return tuple(out)


def state(buffer_s: float, history: tuple[Sample, ...] = (), *, last: int | None = 3, **kw: object) -> PlayerState:
    fields = dict(
        now=100.0,
        buffer_s=buffer_s,
        bitrates_bps=LADDER,
        segment_duration_s=SEG,
        max_buffer_s=10.0,
        last_level=last if history else None,
        history=history,
        next_index=len(history),
        segment_count=48,
    )
    fields.update(kw)
    return PlayerState(**fields)  # type: ignore[arg-type]


def choose(name: str, st: PlayerState, **params: object) -> int:
    return create_abr(name, **params).choose(st).level


# ------------------------------------------------------------------ registry


def test_registry_lists_every_algorithm() -> None:
    expected = {"grate", "throughput", "throughput_sliding", "bba", "bola", "mpc_fast", "mpc_robust", "dynamic"}
    assert expected <= set(registry.available_abrs())


def test_unknown_algorithm_names_the_key() -> None:
    with pytest.raises(ConfigError, match="abr: unknown ABR 'nope'"):
        create_abr("nope")


def test_register_a_custom_algorithm(monkeypatch: pytest.MonkeyPatch) -> None:
    class Lowest(AbrAlgorithm):
        name = "lowest_test"

        def choose(self, state: PlayerState) -> Decision:
            return Decision(level=0)

    monkeypatch.setitem(registry.ABRS, "lowest_test", Lowest)  # the registry is a literal dict: one entry
    assert choose("lowest_test", state(9.0, samples(1e7))) == 0


@pytest.mark.parametrize("name", ["grate", "throughput", "throughput_sliding", "bba", "bola", "dynamic", "dashjs",
                                  "mpc_fast", "mpc_robust", "pensieve", "fixed"])
def test_first_segment_is_lowest(name: str) -> None:
    assert choose(name, state(0.0)) == 0


def test_first_segment_test_covers_every_registered_algorithm() -> None:
    assert set(registry.available_abrs()) - {"lowest_test"} == {
        "grate", "throughput", "throughput_sliding", "bba", "bola", "dynamic", "dashjs", "mpc_fast", "mpc_robust",
        "pensieve", "fixed"}


def test_fixed_keeps_its_level_whatever_the_network_and_clamps_to_the_ladder() -> None:
    assert [choose("fixed", st, level=5) for st in (state(0.0), state(0.0, samples(1e5)), state(9.0, samples(1e8)))] \
        == [5, 5, 5]
    assert choose("fixed", state(4.0, samples(1e7)), level=20) == TOP  # e.g. the audio stream's shorter ladder
    with pytest.raises(ConfigError, match="level"):
        create_abr("fixed", level=-1)


# --------------------------------------------------------------------- grate

GRATE_CASES = [
    # (last segment's rate bit/s, last level, expected)
    (10e6, 3, TOP),  # plenty: top
    (4.0e6, 3, TOP),  # exactly the top bitrate: <= rate
    (1.2e6, 7, 4),  # drop: highest <= 1.2 M is 1 M, within one decision
    (650e3, 0, 2),  # up several levels at once
    (150e3, 5, 5),  # below the lowest: GPAC keeps the current level
]


@pytest.mark.parametrize(("rate", "last", "expected"), GRATE_CASES)
def test_grate(rate: float, last: int, expected: int) -> None:
    assert choose("grate", state(5.0, samples(3e6, rate), last=last)) == expected


def test_grate_uses_request_to_last_byte_rate() -> None:
    # 800 kbit/s x 4 s = 400 kB in 1 s after 1 s of latency: 3.2 Mbit/s without, 1.6 Mbit/s with latency
    hist = samples(3.2e6, latency=1.0)
    decision = create_abr("grate").choose(state(5.0, hist))
    assert decision.estimate_bps == pytest.approx(1.6e6)
    assert decision.level == 5


# ---------------------------------------------------------------- throughput

THROUGHPUT_CASES = [
    # (rates, expected level) — EWMA (current dash.js default), safety 0.9
    ((10e6,) * 5, TOP),
    ((1.2e6,) * 5, 4),  # 0.9 x 1.2 M = 1.08 M -> 1 M
    ((1.0e6,) * 5, 3),  # 0.9 M -> 800 k
    ((150e3,) * 5, 0),
]


@pytest.mark.parametrize(("rates", "expected"), THROUGHPUT_CASES)
def test_throughput_steady_rates(rates: tuple[float, ...], expected: int) -> None:
    assert choose("throughput", state(5.0, samples(*rates))) == expected
    assert choose("throughput_sliding", state(5.0, samples(*rates))) == expected


def after_drop(name: str, count: int) -> list[int]:
    """Levels chosen after a 5 -> 1 Mbit/s step; each segment arrives at 1 Mbit/s."""
    hist = samples(*([5e6] * 6), level=TOP)
    level, levels = TOP, []
    for _ in range(count):
        hist = hist + samples(1e6, level=level, t0=hist[-1].t_last_byte)
        level = choose(name, state(5.0, hist, last=level))
        levels.append(level)
    return levels


@pytest.mark.parametrize("name", ["grate", "throughput", "dynamic"])
def test_drop_goes_below_within_three_segments(name: str) -> None:
    levels = after_drop(name, 3)
    assert levels[0] < TOP and LADDER[levels[-1]] < 1e6, levels


@pytest.mark.parametrize("name", ["throughput_sliding", "mpc_fast", "mpc_robust"])
def test_window_averages_step_down_at_once_and_reach_the_rate_within_five(name: str) -> None:
    # a 4-5 sample window (dash.js v2.9.3, MPC's harmonic mean) still remembers 5 Mbit/s for a while
    levels = after_drop(name, 5)
    assert levels[0] < TOP and LADDER[levels[-1]] <= 1e6, levels


def test_throughput_latency_dead_time() -> None:
    # dash.js getQualityForBitrate: rate x (1 - latency/segment); latency > segment -> 0
    fast = samples(*([2e6] * 5), latency=2.0)
    assert choose("throughput", state(5.0, fast)) == 3  # 0.9 x 2 M x (1 - 2/4) = 0.9 M -> 800 k
    very_late = samples(*([2e6] * 5), latency=5.0)
    assert choose("throughput", state(5.0, very_late)) == 0


def test_sliding_window_widens_on_variance() -> None:
    est = ThroughputEstimator(method="sliding_window")
    assert est.sample_size([1.0] * 10) == 4
    assert est.sample_size([1.0] * 6 + [2.0]) == 5  # the newest pair jumped
    assert est.sample_size([1.0, 2.0]) == 2


def test_ewma_constant_rate_is_that_rate() -> None:
    est = ThroughputEstimator()
    assert est.average_bps(samples(*([3e6] * 4))) == pytest.approx(3e6)


# ----------------------------------------------------------------------- BBA

BBA_CASES = [
    # (buffer s, last level, expected) with max buffer 10 s, segment 4 s:
    # reservoir max(3.75, 4) = 4 s, cushion 5.25 s, top at >= 9.25 s
    (0.0, 5, 0),  # empty buffer: lowest
    (4.0, 3, 0),  # in the reservoir
    (9.5, 0, TOP),  # above reservoir + cushion: top
    (6.0, 2, 5),  # f = 0.2 + 3.8 x 2/5.25 = 1.648 M >= rate_plus -> highest below f: 1.5 M
    (6.0, 5, 5),  # f between rate_minus (1 M) and rate_plus (2.5 M): stay
    (6.0, TOP, 6),  # f <= rate_minus (2.5 M): lowest above f = 2.5 M
]


@pytest.mark.parametrize(("buffer", "last", "expected"), BBA_CASES)
def test_bba(buffer: float, last: int, expected: int) -> None:
    assert choose("bba", state(buffer, samples(3e6), last=last)) == expected


# ---------------------------------------------------------------------- BOLA


def test_bola_parameters_scaled_to_max_buffer() -> None:
    bola = Bola()
    st = state(5.0, samples(3e6))
    utilities, gp, vp = bola.parameters(st)
    assert utilities[0] == pytest.approx(1.0)
    # dash.js: buffer_time = max(12, 10 + 2 x 8) = 26 s -> scaled by 10/26
    min_buffer, buffer_time = 10 * 10 / 26, 10.0
    assert gp == pytest.approx((utilities[-1] - 1) / (buffer_time / min_buffer - 1))
    assert vp == pytest.approx(min_buffer / gp)


@pytest.mark.parametrize(("buffer", "expected"), [(0.0, 0), (3.0, 0), (10.0, TOP), (12.0, TOP)])
def test_bola_buffer_to_level(buffer: float, expected: int) -> None:
    assert Bola().level_for_buffer(state(buffer, samples(3e6)), buffer) == expected


def test_bola_level_grows_with_buffer() -> None:
    bola = Bola()
    st = state(5.0, samples(3e6))
    levels = [bola.level_for_buffer(st, b / 2) for b in range(0, 21)]
    assert levels == sorted(levels) and levels[0] == 0 and levels[-1] == TOP


def test_bola_startup_then_steady() -> None:
    bola = Bola()
    first = bola.choose(state(2.0, samples(10e6)))
    assert first.memo["bola_state"] == "startup" and first.level == TOP  # throughput-based
    second = bola.choose(state(5.0, samples(10e6, 10e6), memo=first.memo))
    assert second.memo["bola_state"] == "steady"


def test_bola_steady_guard_against_unsustainable_step_up() -> None:
    # full buffer wants the top, throughput (0.9 x 1.2 M) sustains only 1 M: BOLA-O caps at max(1 M, last)
    st = state(10.0, samples(1.2e6, 1.2e6), last=2, memo={"bola_state": "steady"})
    assert choose("bola", st) == 4


# ----------------------------------------------------------------------- MPC


def brute_force_mpc(st: PlayerState, rate: float, horizon: int) -> int:
    """Pensieve's loop, literally: enumerate, simulate, keep the first best."""
    best, best_combo = -1e18, None
    for combo in itertools.product(range(len(LADDER)), repeat=horizon):
        buffer, stall, reward, last = st.buffer_s, 0.0, 0.0, LADDER[st.last_level or 0]
        for level in combo:
            dl = LADDER[level] * SEG / rate
            stall += max(dl - buffer, 0.0)
            buffer = max(buffer - dl, 0.0) + SEG
            reward += LADDER[level] / 1e6 - abs(LADDER[level] - last) / 1e6
            last = LADDER[level]
        reward -= 4.3 * stall
        if reward > best:
            best, best_combo = reward, combo
    assert best_combo is not None
    return best_combo[0]


@pytest.mark.parametrize(("buffer", "rate", "last"), [(2.0, 1e6, 3), (8.0, 3e6, 5), (0.5, 5e6, 0), (9.0, 300e3, 7)])
def test_mpc_matches_enumeration(buffer: float, rate: float, last: int) -> None:
    st = state(buffer, samples(2e6), last=last)
    mpc = Mpc(horizon=3)
    assert mpc.best_first_level(st, rate) == brute_force_mpc(st, rate, 3)


def test_mpc_fast_prediction_is_harmonic_mean_of_last_five() -> None:
    hist = samples(1e6, 8e6, 2e6, 2e6, 4e6, 4e6)  # the oldest (1 M) is outside the window
    rates = [s.request_rate_bps for s in hist[-5:]]
    decision = create_abr("mpc_fast").choose(state(6.0, hist))
    assert decision.estimate_bps == pytest.approx(5 / sum(1 / r for r in rates))


def test_mpc_robust_divides_by_max_error() -> None:
    hist = samples(2e6, 2e6)
    first = create_abr("mpc_robust").choose(state(6.0, hist))
    assert first.estimate_bps == pytest.approx(2e6)  # no error yet
    hist2 = hist + samples(1e6, t0=hist[-1].t_last_byte)
    second = create_abr("mpc_robust").choose(state(6.0, hist2, memo=first.memo))
    harmonic = 3 / (2 / 2e6 + 1 / 1e6)
    assert second.estimate_bps == pytest.approx(harmonic / (1 + 1.0))  # |2 M - 1 M| / 1 M = 1


@pytest.mark.parametrize("name", ["mpc_fast", "mpc_robust"])
def test_mpc_extremes(name: str) -> None:
    assert choose(name, state(10.0, samples(*([50e6] * 5)))) == TOP
    assert choose(name, state(1.0, samples(*([150e3] * 5)), last=TOP)) == 0


def test_mpc_horizon_shrinks_at_the_end() -> None:
    st = state(4.0, samples(3e6), segment_count=2, next_index=1)
    assert choose("mpc_fast", st) == Mpc(horizon=1).best_first_level(st, 3e6 * 1.0)


# ------------------------------------------------------------------- DYNAMIC


def test_dynamic_switches_to_bola_above_stable_buffer_and_back_below_half() -> None:
    dyn = Dynamic()
    low = dyn.choose(state(3.0, samples(2e6, 2e6)))
    assert low.memo["use_bola"] is False
    high = dyn.choose(state(10.5, samples(2e6, 2e6), memo=low.memo))
    assert high.memo["use_bola"] is True
    mid = dyn.choose(state(6.0, samples(2e6, 2e6), memo=high.memo))
    assert mid.memo["use_bola"] is True  # hysteresis: stays above 5 s
    drop = dyn.choose(state(4.0, samples(2e6, 2e6), memo=mid.memo))
    assert drop.memo["use_bola"] is False


def test_dynamic_uses_throughput_rule_when_buffer_low() -> None:
    st = state(2.0, samples(*([1.2e6] * 5)))
    assert choose("dynamic", st) == choose("throughput", st)


# ------------------------------------------------- dash.js 5.2.1's default chain (DashJs)

RACING = (70_000, 180_000, 350_000, 650_000, 1_300_000)  # media/ladders/youtube_racing.toml, 5 s segments


def racing_samples(*rates_bps: float, level: int = 3, t0: float = 0.0, buffers: tuple[float, ...] = ()) -> tuple[
        Sample, ...]:
    """5 s segments of RACING[level] downloaded at the given rates; ``buffers``: each one's buffer after."""
    out, t = [], t0
    for i, rate in enumerate(rates_bps):
        size = int(RACING[level] * 5 / 8)
        dl = 8 * size / rate
        after = buffers[i] if i < len(buffers) else 5.0 * (i + 1)
        out.append(Sample(level=level, bytes=size, t_request=t, t_first_byte=t, t_last_byte=t + dl, duration_s=5.0,
                          buffer_after_s=after))
        t += dl
    return tuple(out)


def racing_state(buffer_s: float, history: tuple[Sample, ...] = (), **kw: object) -> PlayerState:
    fields: dict[str, object] = dict(now=history[-1].t_last_byte if history else 0.0, buffer_s=buffer_s,
                                     bitrates_bps=RACING, segment_duration_s=5.0, max_buffer_s=30.0,
                                     last_level=history[-1].level if history else None, history=history,
                                     next_index=len(history), segment_count=23)
    fields.update(kw)
    return PlayerState(**fields)  # type: ignore[arg-type]


def test_dashjs_bola_ladder_for_the_racing_ladder_at_dashjs_buffer_time_30_s() -> None:
    # dash.js's formulas (BolaRule 68053-68231): T = max(30, 10 + 2 x 5) = 30, gp = (u_max - 1) / (T / 10 - 1)
    ladder = BolaLadder.of(RACING, 30.0)
    assert ladder is not None
    assert (ladder.gp, ladder.vp) == (pytest.approx(1.46081, abs=1e-5), pytest.approx(6.84551, abs=1e-5))
    assert [round(ladder.max_buffer(q), 2) for q in range(5)] == [16.85, 23.31, 27.86, 32.10, 36.85]
    assert [round(ladder.min_buffer(q), 2) for q in range(5)] == [0.0, 12.73, 18.49, 22.92, 27.36]
    # the score's "u - 1" puts a level's choice Vp below its min_buffer (as in dash.js): 18.49 - 6.85 = 11.64
    assert [ladder.level(b) for b in (5.0, 10.0, 11.5, 11.8, 17.0, 24.6)] == [0, 1, 1, 2, 3, 4]
    assert BolaLadder.of((48_000,), 30.0) is None  # one bitrate: BOLA_STATE_ONE_BITRATE


@pytest.mark.parametrize(("switches", "cap"), [
    # Chromium's clean-link session (docs/racing_chromium_mechanism.md §9.5): the drop 4 -> 2 caps at 3 once the
    # counts reach 8 samples: "[SwitchHistoryRule]: Switch to index: 3 samples: 8 drops: 1"
    (((4, 1), (2, 0), *[(4, 0)] * 6), 3),
    (((4, 1), (2, 0), *[(4, 0)] * 5), None),  # 7 samples: too few
    (tuple([(4, 0)] * 8), None),  # no drop
    (((2, 1), *[(3, 0)] * 7), 3),  # the counts cross at 3, which never dropped: the cap is 3 itself
    (((0, 1), *[(0, 0)] * 7), 0),  # level 0 stays 0
    (((3, 0), *[(4, 0)] * 6, (4, 1)), 3),  # 1 drop in 7 no-drops: 0.14 > 0.075
])
def test_dashjs_switch_history_rule(switches: tuple[tuple[int, int], ...], cap: int | None) -> None:
    assert DashJs.switch_history(switches, 4) == cap


def test_dashjs_no_rule_asks_before_the_first_segment_so_the_level_stays() -> None:
    decision = create_abr("dashjs").choose(racing_state(0.0))
    assert decision.level == 0 and decision.memo["switches"] == ()  # dash.js keeps its initial bitrate


def test_dashjs_start_like_chromium_throughput_up_then_insufficient_buffer_down_then_history_cap() -> None:
    algo = create_abr("dashjs")
    # segment 0 at level 3 in 2 s (1.3 Mbit/s... 1.65 Mbit/s here): the throughput rule asks level 4
    first = racing_samples(1.65e6, level=3)
    d1 = algo.choose(racing_state(5.0, first))
    assert d1.level == 4 and d1.memo["switches"] == ((3, 0),)
    # fast switch: segment 0 again at level 4 while playing, buffer 1.67 s: InsufficientBufferRule's
    # 0.7 x 1.65 Mbit/s x 1.67 / 5 = 386 kbit/s -> level 2, lower than the throughput rule's 4 (the lowest wins)
    again = Sample(level=4, bytes=int(1.3e6 * 5 / 8), t_request=2.0, t_first_byte=2.0, t_last_byte=2.0 + 8 * 1.3e6 * 5 / 8
                   / 1.65e6, duration_s=0.0, buffer_after_s=1.67, replacement=True)
    history = (*first, again)
    d2 = algo.choose(racing_state(1.67, history, position_s=3.33, memo=d1.memo))
    assert d2.level == 2 and d2.memo["switches"] == ((3, 0), (4, 1))
    # six checks at 4 later, the history caps at 3 although the throughput affords 4
    memo = {**d2.memo, "switches": ((4, 1), (2, 0), *[(4, 0)] * 6)}
    d3 = algo.choose(racing_state(9.0, history, memo=memo, position_s=10.0))
    assert d3.level == 3 and d3.memo["switches"][-1] == (4, 1)


def test_dashjs_insufficient_buffer_rule_asks_the_lowest_level_when_the_buffer_ran_empty() -> None:
    history = racing_samples(3e6, 3e6, level=3)
    algo = create_abr("dashjs")
    assert algo.choose(racing_state(0.2, history, position_s=20.0)).level == 0  # BUFFER_EMPTY while playing
    # at the presentation's start dash.js does not signal BUFFER_EMPTY (the throughput rule asks 4), but the
    # InsufficientBufferRule's formula gives 0.7 x 3 Mbit/s x 0.2 / 5 = 84 kbit/s: level 0 all the same
    assert algo.choose(racing_state(0.2, history, position_s=0.0)).level == 0
    assert algo.choose(racing_state(4.0, history, position_s=20.0)).level == 4  # 1.68 Mbit/s affords 4


def test_dashjs_bola_takes_over_at_12_s_starts_from_the_throughput_and_places_a_placeholder() -> None:
    history = racing_samples(0.8e6, 0.8e6, 0.8e6, level=3, buffers=(5.0, 9.0, 12.5))
    d = create_abr("dashjs").choose(racing_state(12.5, history))
    bola = d.memo["bola"]
    assert d.memo["use_bola"] and bola.state == "startup"  # STEADY only once a segment arrived under BOLA
    assert d.level == 3  # STARTUP: the safe throughput's level (0.72 Mbit/s -> 650 kbit/s)
    ladder = BolaLadder.of(RACING, 30.0)
    assert ladder is not None and bola.placeholder_s == pytest.approx(ladder.min_buffer(3) - 12.5)
    # the hysteresis: below 6 s the throughput rule is back, between 6 and 12 s BOLA stays
    assert create_abr("dashjs").choose(racing_state(8.0, history, memo={**d.memo, "seen": 3})).memo["use_bola"]
    assert not create_abr("dashjs").choose(racing_state(5.5, history, memo={**d.memo, "seen": 3})).memo["use_bola"]


def steady(placeholder_s: float, current: int, **kw: object) -> dict[str, object]:
    """A DashJs memo with BOLA in STEADY (its state after the takeover and one segment)."""
    bola = _BolaState(state="steady", placeholder_s=placeholder_s, current=current, last_duration_s=5.0,
                          advanced=True, **kw)  # type: ignore[arg-type]
    return {"use_bola": True, "bola": bola, "switches": (), "seen": 0, "abandons": 0}


def test_dashjs_bola_steady_grows_the_placeholder_by_the_time_since_the_last_download() -> None:
    history = racing_samples(0.8e6, level=3)  # safe throughput 0.72 Mbit/s: level 3
    memo = {**steady(2.0, 3, last_finish=10.0), "seen": 1}
    d = create_abr("dashjs").choose(racing_state(14.0, history, memo=memo, now=13.0))
    # placeholder 2 + (13 - 10) = 5 s; BOLA at 14 + 5 = 19 s: level 3 (level 4 from 20.5 s); below maxBuf(3)
    # = 32.1 s: no delay, the placeholder stays
    assert (d.level, d.delay_s) == (3, 0.0)
    assert d.memo["bola"].placeholder_s == pytest.approx(5.0)
    assert (d.memo["bola"].last_call, d.memo["bola"].last_finish) == (13.0, None)
    again = create_abr("dashjs").choose(racing_state(13.0, history, memo=d.memo, now=14.0))
    assert again.memo["bola"].placeholder_s == pytest.approx(6.0)  # no download since: the time since the call


def test_dashjs_bola_o_holds_the_level_and_the_excess_buffer_becomes_a_wait() -> None:
    # level 1, throughput for level 1 only, 25 s of buffer: BOLA's own choice (4) is held at 1 (BOLA-O), and the
    # 25 - maxBuf(1) = 1.69 s above level 1's max buffer become a wait (the placeholder is empty)
    slow = racing_samples(0.25e6, 0.25e6, 0.25e6, level=1, buffers=(5.0, 10.0, 25.0))
    memo = {**steady(0.0, 1), "seen": 3}
    d = create_abr("dashjs").choose(racing_state(25.0, slow, memo=memo))
    ladder = BolaLadder.of(RACING, 30.0)
    assert ladder is not None and ladder.max_buffer(1) == pytest.approx(23.3108, abs=1e-4)
    assert d.level == 1 and d.delay_s == pytest.approx(25.0 - ladder.max_buffer(1))
    at_top = create_abr("dashjs").choose(racing_state(40.0, racing_samples(3e6, 3e6, level=4), memo={**steady(
        0.0, 4), "seen": 2}))
    assert at_top.level == 4 and at_top.delay_s == 0.0  # at the top level the scheduler decides (no wait)


def test_dashjs_bola_adds_a_segment_to_the_placeholder_for_a_replacement_and_clears_it_on_empty() -> None:
    algo = create_abr("dashjs")
    first = racing_samples(1.6e6, level=3, buffers=(20.0,))
    replaced = Sample(level=4, bytes=100_000, t_request=first[-1].t_last_byte, t_first_byte=first[-1].t_last_byte,
                      t_last_byte=first[-1].t_last_byte + 0.5, duration_s=0.0, buffer_after_s=20.0, replacement=True)
    history = (*first, replaced)
    d = algo.choose(racing_state(20.0, history, memo={**steady(4.0, 3), "seen": 1}))
    # the segment: 4 x 0.99 = 3.96, under maxBuf(4) - (20 + 0.5) = 16.35; a replacement: + 5 s = 8.96; the check
    # comes as it finished (nothing added); BOLA at 28.96 s: level 4, below maxBuf(4) = 36.85 (no delay)
    assert d.memo["bola"].placeholder_s == pytest.approx(8.96) and (d.level, d.delay_s) == (4, 0.0)
    assert d.memo["bola"].current == 4
    emptied = algo.choose(racing_state(0.1, history, memo={**d.memo, "use_bola": True}, position_s=30.0,
                                       now=d.memo["bola"].last_call + 1.0))
    # the buffer ran empty while playing: the InsufficientBufferRule asks for the lowest level, BOLA hands over to
    # the throughput rule (0.1 s < 6 s), and its placeholder is gone (_onBufferEmpty)
    assert emptied.level == 0 and emptied.memo["use_bola"] is False and emptied.memo["bola"].placeholder_s == 0.0
