"""What one ABR decision costs the player: CPU time per ``choose()`` call, per algorithm.

    .venv/bin/python bench/abr_decision_cost.py [--abrs pensieve,bba,bola,mpc_fast,mpc_robust] [-n 2000]

No root, no network: it builds the state the player hands its ABR before
segment ``k`` of a 48-segment session (the ``abr_quic_tcp`` ladder, 4 s
segments, max buffer 12 s, a history of ``k`` downloaded segments at about
2 Mbit/s, ``k`` cycling over 0..47 so that short and long histories both
count) and times ``-n`` decisions with ``time.process_time`` (CPU, not wall
clock) after a warm-up. The first ``pensieve`` call also loads the weights
(timed apart: ``load``). Printed: per algorithm the mean, median and 99th
percentile microseconds per decision and the share of a 4 s segment's
playing time that the mean is. Run it in the VM to get the VM's cost
(Python there is about 8x slower than on the host under TCG).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nest_experiments.dash.content import media  # noqa: E402
from nest_experiments.dash.core.abr.base import AbrAlgorithm, PlayerState, Sample  # noqa: E402
from nest_experiments.dash.core.abr.registry import create_abr  # noqa: E402

SEGMENTS = 48
SEGMENT_S = 4.0


def states() -> list[PlayerState]:
    rates = tuple(lv.bitrate_bps for lv in media.load_ladder("abr_quic_tcp").video.levels)
    history: list[Sample] = []
    out = []
    t = 0.0
    for k in range(SEGMENTS):
        out.append(PlayerState(now=t, buffer_s=min(12.0, 2.0 + 0.5 * k), bitrates_bps=rates,
                               segment_duration_s=SEGMENT_S, max_buffer_s=12.0,
                               last_level=history[-1].level if history else None, history=tuple(history),
                               next_index=k, segment_count=SEGMENTS))
        level = 3 + k % 3
        size = rates[level] * SEGMENT_S / 8
        took = 8 * size / (2e6 * (1 + 0.3 * ((k % 5) - 2) / 2))
        history.append(Sample(level=level, bytes=int(size), t_request=t, t_first_byte=t + 0.08,
                              t_last_byte=t + 0.08 + took, duration_s=SEGMENT_S, buffer_after_s=8.0))
        t += took + 0.08
    return out


def time_abr(name: str, n: int, cases: list[PlayerState]) -> tuple[float, list[float]]:
    t0 = time.process_time()
    abr: AbrAlgorithm = create_abr(name)
    abr.choose(cases[0])
    load = time.process_time() - t0
    for case in cases:  # warm-up
        abr.choose(case)
    samples = []
    for i in range(n):
        case = cases[i % len(cases)]
        t = time.process_time()
        abr.choose(case)
        samples.append(time.process_time() - t)
    return load, samples


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--abrs", default="pensieve,bba,bola,mpc_fast,mpc_robust")
    p.add_argument("-n", type=int, default=2000, help="decisions per algorithm")
    args = p.parse_args()
    cases = states()
    print(f"{'abr':<12} {'load ms':>8} {'mean us':>9} {'median us':>10} {'p99 us':>9} {'of 4 s':>9}")
    for name in args.abrs.split(","):
        load, samples = time_abr(name, args.n, cases)
        mean = statistics.fmean(samples)
        p99 = sorted(samples)[int(0.99 * (len(samples) - 1))]
        print(f"{name:<12} {load * 1e3:8.1f} {mean * 1e6:9.1f} {statistics.median(samples) * 1e6:10.1f} "
              f"{p99 * 1e6:9.1f} {mean / SEGMENT_S:9.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
