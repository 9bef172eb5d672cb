"""tracecheck: delivered vs trace between two qdisc samples, on synthetic samples of a packet-by-packet link."""

from __future__ import annotations

import math

import pytest

from nest_experiments.analysis.tracecheck import PACKET_BITS, Fidelity, Sample, Window, step_bits, windows


def htb_counter(steps: list[tuple[float, float]], t: float) -> float:
    """A busy leaf's sent bits at ``t`` under a rate schedule: whole packets, each counted when HTB starts it."""
    return PACKET_BITS * (math.floor(step_bits(steps, t) / PACKET_BITS) + 1)


def sampled(steps: list[tuple[float, float]], times: list[float], backlog: int = 5) -> list[Sample]:
    return [Sample(t=t, sent_bits=htb_counter(steps, t), backlog_pkts=backlog) for t in times]


def late_grid() -> list[float]:
    """A 100 ms grid over 0-10 s where the sampler ran late: every whole-second tick 40-85 ms late (where the
    rate changes, and where the windows' edges are), and the ticks from 4.8 to 5.2 s missing."""
    times = []
    for k in range(101):
        t = k / 10 + (0.04 + 0.005 * (k // 10) if k % 10 == 0 and k else 0.0)
        if not 48 <= k <= 52:
            times.append(round(t, 4))
    return times


def alternating(low: float, high: float) -> list[tuple[float, float]]:
    """A trace that changes rate every whole second (as the fcc and hsdpa families do)."""
    return [(float(k), high if k % 2 else low) for k in range(11)]


@pytest.mark.parametrize(("low", "high"), [(64_000, 256_000), (500_000, 2_000_000), (4_000_000, 1_000_000),
                                           (1_000_000, 1_000_000)])
def test_late_samples_at_rate_changes_do_not_make_paired_errors(low: float, high: float) -> None:
    steps = alternating(low, high)
    ws = windows(steps, sampled(steps, late_grid()), start_s=1.0, end_s=9.0)
    assert len(ws) == 8
    errors = [(w.delivered_bps - w.trace_bps) * w.span_s for w in ws]
    assert all(abs(e) < PACKET_BITS for e in errors), errors  # less than one packet per window
    assert all(w.within for w in ws), [round(w.ratio, 3) for w in ws]


def test_windows_start_and_end_on_samples_and_share_their_edges() -> None:
    times = late_grid()
    ws = windows([(0.0, 1e6)], sampled([(0.0, 1e6)], times), start_s=1.0, end_s=9.0)
    assert all(w.t in times and w.t_end in times for w in ws)
    assert all(a.t_end == b.t for a, b in zip(ws, ws[1:], strict=False))
    assert [w.t for w in ws] == [1.045, 2.05, 3.055, 4.06, 4.7, 6.07, 7.075, 8.08]  # the samples nearest each edge
    assert ws[3].span_s == pytest.approx(0.64)  # 4.8-5.2 were not sampled


def test_the_trace_is_integrated_over_exactly_the_two_sample_instants() -> None:
    steps = [(0.0, 1_000_000.0), (1.05, 2_000_000.0), (1.5, 500_000.0)]
    samples = [Sample(t=t, sent_bits=b, backlog_pkts=1) for t, b in [(1.0, 0.0), (1.85, 1_000_000.0), (2.05, 1_100_000.0)]]
    (w,) = windows(steps, samples, start_s=1.0, end_s=2.0)
    assert (w.t, w.t_end) == (1.0, 2.05)  # the sample nearest to 2.0
    assert w.trace_bps == pytest.approx((0.05 * 1e6 + 0.45 * 2e6 + 0.55 * 0.5e6) / 1.05)
    assert w.delivered_bps == pytest.approx(1_100_000 / 1.05)
    assert step_bits(steps, 1.05) == pytest.approx(1_050_000)


def test_a_window_with_an_empty_queue_at_one_sample_is_not_busy() -> None:
    samples = sampled([(0.0, 1e6)], [1.0, 1.5, 2.0, 2.5, 3.0])
    samples[3] = Sample(t=2.5, sent_bits=samples[3].sent_bits, backlog_pkts=0)
    ws = windows([(0.0, 1e6)], samples, start_s=1.0, end_s=3.0)
    assert [w.busy for w in ws] == [True, False]


def test_mean_ratio_weighs_windows_by_their_length_and_the_packet_bound_by_their_bits() -> None:
    short = Window(t=0.0, t_end=0.5, trace_bps=1e6, delivered_bps=0.5e6, busy=True)
    long = Window(t=0.5, t_end=2.0, trace_bps=1e6, delivered_bps=1e6, busy=True)
    fid = Fidelity(link="l", direction="forward", node="r1", windows=(short, long), htb_drops=0, leaf_drops=0)
    assert fid.mean_ratio == pytest.approx(1.75 / 2.0)
    slow = Window(t=0.0, t_end=0.5, trace_bps=64_000, delivered_bps=64_000, busy=True)
    assert slow.tolerance == pytest.approx(1.5 * PACKET_BITS / 32_000)  # 1.5 packets of the window's 32 kbit
