"""Bandwidth traces (:mod:`nest_experiments.config.traces`): parsing, generators, compiling to HTB steps."""

from __future__ import annotations

import statistics

import pytest

from nest_experiments.config import traces as T
from nest_experiments.errors import ConfigError

MBIT = 1_000_000


def rates(steps: tuple[tuple[float, float], ...]) -> list[float]:
    return [round(r) for _, r in steps]


# ---------------------------------------------------------------- Mahimahi


def test_mahimahi_counts_1500_byte_opportunities_per_step_and_loops() -> None:
    # 0-100 ms: 10 opportunities (1.2 Mbit/s), 100-200 ms: 1 (120 kbit/s); period = last stamp = 200 ms
    text = "\n".join(["0"] * 5 + ["50"] * 5 + ["150", "200"]) + "\n"
    trace = T.parse_mahimahi(text, name="x.trace")
    assert trace.period_s == 0.2
    # as mm-link plays it: the second period starts at 200 ms, its "0" stamps coincide with the "200" one
    assert rates(trace.steps(0.1, 0.6)) == [1_200_000, 120_000, 1_320_000, 120_000, 1_320_000, 120_000]
    assert trace.bits_until(0.6) == (10 + 1 + 11 + 1 + 11 + 1) * T.PACKET_BITS


def test_mahimahi_repeated_stamps_are_several_opportunities() -> None:
    trace = T.parse_mahimahi("1\n1\n1\n1\n1000\n", name="t")
    assert trace.bits_until(1.0) == 4 * T.PACKET_BITS  # 1 ms x4; the one at 1000 ms is not before 1 s
    assert trace.bits_until(1.0005) == 5 * T.PACKET_BITS
    assert trace.bits_until(2.0) == (4 + 1 + 4) * T.PACKET_BITS  # the second period's last one is at 2 s


@pytest.mark.parametrize(("text", "where", "what"), [
    ("", "t.trace", "empty"),
    ("\n\n", "t.trace", "empty"),
    ("0\n10\n5\n", "t.trace:3", "before the previous one"),
    ("0\n1.5\n", "t.trace:2", "integer millisecond"),
    ("0,2mbit\n", "t.trace:1", ".csv"),
    ("0\n0\n", "t.trace:2", "period\\) is 0"),
])  # fmt: skip
def test_bad_mahimahi_traces_name_file_and_line(text: str, where: str, what: str) -> None:
    with pytest.raises(ConfigError, match=what) as err:
        T.parse_mahimahi(text, name="t.trace")
    assert err.value.path == where


# ---------------------------------------------------------------- schedules


def test_schedule_csv_with_header_units_and_loop() -> None:
    text = "t_s,rate\n# a comment\n0,2mbit\n2.5,1mbit\n4,500kbit\n6,loop\n"
    trace = T.parse_schedule_csv(text, name="s.csv")
    assert trace.period_s == 6.0
    assert rates(trace.steps(0.5, 12))[:12] == [2 * MBIT] * 5 + [MBIT] * 3 + [500_000] * 4
    assert rates(trace.steps(0.5, 12))[12:] == rates(trace.steps(0.5, 12))[:12]  # looped


def test_schedule_without_loop_holds_its_last_rate_and_averages_within_a_step() -> None:
    trace = T.parse_schedule_list([["0s", "2mbit"], ["150ms", "1mbit"]], path="k")
    assert trace.period_s is None
    assert rates(trace.steps(0.1, 0.5)) == [2 * MBIT, 1_500_000, MBIT, MBIT, MBIT]


def test_schedule_outage_is_allowed_but_not_everywhere() -> None:
    trace = T.parse_schedule_csv("0,1mbit\n1,0bit\n2,loop\n", name="s.csv")
    assert rates(trace.steps(1.0, 2)) == [MBIT, 0]
    with pytest.raises(ConfigError, match="every rate is 0") as err:
        T.parse_schedule_csv("0,0mbit\n5,0kbit\n", name="z.csv")
    assert err.value.path == "z.csv"


@pytest.mark.parametrize(("text", "where", "what"), [
    ("", "s.csv", "empty"),
    ("t_s,rate\n", "s.csv", "empty"),
    ("1,2mbit\n", "s.csv:1", "first row must be at 0"),
    ("0,2mbit\n3,1mbit\n3,2mbit\n", "s.csv:3", "times must increase"),
    ("0,2mbit\n3,1mbit\n2,2mbit\n", "s.csv:3", "times must increase"),
    ("0,2mbps\n", "s.csv:1", "bytes/s"),
    ("0,2\n", "s.csv:1", "needs a unit"),
    ("0,2furlong\n", "s.csv:1", "needs a unit"),
    ("0,0furlong\n1,1mbit\n", "s.csv:1", "needs a unit"),
    ("0;2mbit\n", "s.csv:1", "expected 't_s,rate'"),
    ("-1,2mbit\n", "s.csv:1", "time"),
    ("0,2mbit\n5,loop\n6,1mbit\n", "s.csv:3", "after the 'loop' row"),
    ("0,loop\n", "s.csv", "no rate before"),
])  # fmt: skip
def test_bad_schedules_name_file_and_line(text: str, where: str, what: str) -> None:
    with pytest.raises(ConfigError, match=what) as err:
        T.parse_schedule_csv(text, name="s.csv")
    assert err.value.path == where


def test_bad_inline_schedule_names_the_row() -> None:
    with pytest.raises(ConfigError, match="expected \\[time, rate\\]") as err:
        T.parse_schedule_list([["0s", "1mbit"], "2s"], path="links.b.trace")
    assert err.value.path == "links.b.trace[1]"
    with pytest.raises(ConfigError, match="needs a unit") as err:
        T.parse_schedule_list([["0s", 5]], path="links.b.trace")
    assert err.value.path == "links.b.trace[0]"


# ---------------------------------------------------------------- generators


def test_racing_patterns_follow_table_ii_there_and_back() -> None:
    def levels(name: str) -> list[int]:
        trace = T.generate(name, seed=1)
        assert trace.rates_bps is not None
        return [round(r / 1000) for r in trace.rates_bps]

    assert levels("dh") == [1152, 896, 896, 1152]
    assert levels("dl") == [640, 384, 128, 128, 384, 640]
    assert levels("dvl") == [64, 128, 192, 256, 256, 192, 128, 64]
    assert [T.generate(n, seed=1).period_s for n in ("dh", "dl", "dvl")] == [960, 1440, 480]
    dvl = T.generate("dvl", seed=1)
    assert rates(dvl.steps(60, 540)) == [64_000, 128_000, 192_000, 256_000, 256_000, 192_000, 128_000, 64_000, 64_000]
    assert T.generate("dvl", seed=7) .rates_bps == dvl.rates_bps  # a fixed pattern


def test_h2eval_trajectory_stays_in_1_to_5_mbit_with_mean_2_7() -> None:
    trace = T.generate("h2eval", seed=1)
    assert trace.rates_bps is not None
    assert min(trace.rates_bps) == 1 * MBIT and max(trace.rates_bps) == 5 * MBIT
    assert trace.mean_bps(trace.period_s or 0) == pytest.approx(2.7 * MBIT)


@pytest.mark.parametrize("name", ["fcc", "hsdpa"])
def test_synthetic_families_are_seeded(name: str) -> None:
    a, b, c = T.generate(name, seed=1), T.generate(name, seed=1), T.generate(name, seed=2)
    assert a == b and a.rates_bps != c.rates_bps
    assert a.period_s == T.SYNTHETIC_PERIOD_S


def test_fcc_is_steady_and_hsdpa_swings_with_outages() -> None:
    def cv(trace: T.Trace) -> float:
        assert trace.rates_bps is not None
        return statistics.pstdev(trace.rates_bps) / statistics.fmean(trace.rates_bps)

    fcc = [T.generate("fcc", seed=s) for s in range(1, 11)]
    hsdpa = [T.generate("hsdpa", seed=s) for s in range(1, 11)]
    assert max(cv(t) for t in fcc) < 0.3 < min(cv(t) for t in hsdpa)
    assert all(0.3 * MBIT < t.mean_bps(320) < 8 * MBIT for t in fcc)
    assert sum(r == 0 for t in hsdpa for r in t.rates_bps or ()) > 10  # tunnels
    assert all(max(t.rates_bps or ()) <= 8 * MBIT for t in hsdpa)


def test_unknown_generator_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigError, match="unknown trace generator 'dvll' \\(did you mean 'dvl'\\?\\)") as err:
        T.generate("dvll", seed=1, path="links.b.trace.generator")
    assert err.value.path == "links.b.trace.generator"


# ---------------------------------------------------------------- scaling and HTB steps


def test_time_scale_compresses_a_pattern_and_keeps_a_mahimahi_rate() -> None:
    dvl = T.generate("dvl", seed=1).scaled(time_scale=0.1)
    assert dvl.period_s == pytest.approx(48) and rates(dvl.steps(6, 12)) == [64_000, 128_000]
    mm = T.parse_mahimahi("\n".join(str(i) for i in range(1, 1001)) + "\n", name="m")  # 1 packet/ms: 12 Mbit/s
    fast = mm.scaled(time_scale=0.5, rate_scale=0.5)
    assert fast.period_s == 0.5 and fast.bits_until(1.0001) == 2 * 250 * T.PACKET_BITS  # 6 Mbit/s


def test_htb_steps_only_changes_whole_bytes_and_outages_as_one_packet() -> None:
    steps = ((0.0, 1_000_001.0), (0.1, 1_000_003.0), (0.2, 0.0), (0.3, 0.0), (0.4, 2e6), (0.5, 0.0))
    assert T.htb_steps(steps, 0.1) == (
        (0.0, 1_000_000),  # 125000 bytes/s: unchanged at the next step
        (0.2, 60_000),  # an outage of 200 ms: one 1500-byte packet in it at most
        (0.4, 2_000_000),
        (0.5, 120_000),  # the last step: an outage of one step
    )
