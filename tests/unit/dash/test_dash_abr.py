"""ABR algorithms: scenario tables with expected choices."""

from __future__ import annotations

import itertools

import pytest

from nest_experiments.dash import abr
from nest_experiments.dash.abr import Decision, PlayerState, Sample, create_abr
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
    assert expected <= set(abr.available_abrs())


def test_unknown_algorithm_names_the_key() -> None:
    with pytest.raises(ConfigError, match="abr: unknown ABR 'nope'"):
        create_abr("nope")


def test_register_a_custom_algorithm() -> None:
    class Lowest(abr.AbrAlgorithm):
        name = "lowest_test"

        def choose(self, state: PlayerState) -> Decision:
            return Decision(level=0)

    abr.register_abr("lowest_test", Lowest)
    assert choose("lowest_test", state(9.0, samples(1e7))) == 0


@pytest.mark.parametrize("name", ["grate", "throughput", "throughput_sliding", "bba", "bola", "dynamic", "mpc_fast",
                                  "mpc_robust", "pensieve", "fixed"])
def test_first_segment_is_lowest(name: str) -> None:
    assert choose(name, state(0.0)) == 0


def test_first_segment_test_covers_every_registered_algorithm() -> None:
    assert set(abr.available_abrs()) - {"lowest_test"} == {
        "grate", "throughput", "throughput_sliding", "bba", "bola", "dynamic", "mpc_fast", "mpc_robust", "pensieve",
        "fixed"}


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
    est = abr.ThroughputEstimator(method="sliding_window")
    assert est.sample_size([1.0] * 10) == 4
    assert est.sample_size([1.0] * 6 + [2.0]) == 5  # the newest pair jumped
    assert est.sample_size([1.0, 2.0]) == 2


def test_ewma_constant_rate_is_that_rate() -> None:
    est = abr.ThroughputEstimator()
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
    bola = abr.Bola()
    st = state(5.0, samples(3e6))
    utilities, gp, vp = bola.parameters(st)
    assert utilities[0] == pytest.approx(1.0)
    # dash.js: buffer_time = max(12, 10 + 2 x 8) = 26 s -> scaled by 10/26
    min_buffer, buffer_time = 10 * 10 / 26, 10.0
    assert gp == pytest.approx((utilities[-1] - 1) / (buffer_time / min_buffer - 1))
    assert vp == pytest.approx(min_buffer / gp)


@pytest.mark.parametrize(("buffer", "expected"), [(0.0, 0), (3.0, 0), (10.0, TOP), (12.0, TOP)])
def test_bola_buffer_to_level(buffer: float, expected: int) -> None:
    assert abr.Bola().level_for_buffer(state(buffer, samples(3e6)), buffer) == expected


def test_bola_level_grows_with_buffer() -> None:
    bola = abr.Bola()
    st = state(5.0, samples(3e6))
    levels = [bola.level_for_buffer(st, b / 2) for b in range(0, 21)]
    assert levels == sorted(levels) and levels[0] == 0 and levels[-1] == TOP


def test_bola_startup_then_steady() -> None:
    bola = abr.Bola()
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
    mpc = abr.Mpc(horizon=3)
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
    assert choose("mpc_fast", st) == abr.Mpc(horizon=1).best_first_level(st, 3e6 * 1.0)


# ------------------------------------------------------------------- DYNAMIC


def test_dynamic_switches_to_bola_above_stable_buffer_and_back_below_half() -> None:
    dyn = abr.Dynamic()
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
