"""Setup time: seconds to bring a topology up (NeST + our tc adapter + read-back) and down.

    sudo .venv/bin/python bench/setup_time.py [--repeat 3]

Prints, for the dumbbell (6 nodes) and the multi-homed dumbbell (10 nodes):
up, down and total seconds, and the NeST import time (paid once per process).
"""

from __future__ import annotations

import argparse
import statistics
import time

from nest_experiments.config import parse_experiment
from nest_experiments.net.network import Network, nest_modules
from nest_experiments.net.procs import RunState, new_prefix, run_lock


def measure(topology: str) -> tuple[float, float]:
    exp = parse_experiment({"experiment": {"name": "bench", "topology": topology, "duration": "1s"}})
    net = Network(exp.topology, exp.links, state=RunState(prefix=new_prefix()))
    t0 = time.monotonic()
    net.__enter__()
    t1 = time.monotonic()
    net.teardown()
    return t1 - t0, time.monotonic() - t1


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    t = time.monotonic()
    nest_modules()
    print(f"NeST import: {time.monotonic() - t:.2f} s (once per process)")
    with run_lock():
        for topology in ("dumbbell", "multihomed_dumbbell"):
            ups, downs = zip(*(measure(topology) for _ in range(args.repeat)), strict=False)
            print(f"{topology:<20} up {statistics.median(ups):.2f} s, down {statistics.median(downs):.2f} s, "
                  f"total {statistics.median(ups) + statistics.median(downs):.2f} s (median of {args.repeat})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
