"""Does a run's place in a sweep change its figures? One cell, repeated, in one VM.

    sudo .venv/bin/python bench/warmup_bias.py [--reps 4] [--cell kind-pie_target-5ms] [--no-warmup]
    .venv/bin/python bench/warmup_bias.py --folder results/nest_paper     # only read a finished sweep

Runs one cell of the default experiment (the NeST paper's) ``--reps`` times
in a row in one VM, so that the same configuration sits at the first and at
the last position of one sweep, and prints per run (in the order they ran):
the runner's and the apps' CPU seconds, the 1 s windows in which the guest's
CPU was saturated, how long the traffic lasted for the run's duration, each
bottleneck's utilization, iperf3's goodput and PIE's mean delay over its
target. Then, per figure, the first run against the others: its value, their
mean +- sd, and how many of their standard deviations apart they are (|z|;
below ~2 the first run is within the run-to-run spread).
The host's side is printed too: the CPUs qemu got (``host_qemu_cpus``; below
~1.8 something else on the host competed with the guest, and the run says
more about that than about its position) and the hypervisor's steal.
``--no-warmup`` (NEST_EXP_WARMUP=0) measures the cold first run that the
VM runtime's warm-up exists to absorb. ``--folder`` reads any finished sweep
instead, grouping its runs by the VM that ran them (``runs_before``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nest_experiments.analysis.utilization import egress_figures, iperf3_goodput_bps  # noqa: E402
from nest_experiments.rundir import LINKS, MANIFEST, RunFolder  # noqa: E402

FIGURES = ("runner_cpu_s", "app_cpu_s", "saturated", "traffic_s", "util_bn1", "util_bn2", "iperf3_mbps",
           "pie_delay_x_target", "host_qemu_cpus", "host_steal")


def figures(run_dir: Path) -> dict[str, Any]:
    m = RunFolder(run_dir).json(MANIFEST)
    out: dict[str, Any] = {"run": m["run"], "started": m["started"], "runs_before": m.get("runs_before"),
                           "status": m["status"], "runner_cpu_s": m.get("runner_cpu_s"),
                           "app_cpu_s": sum((m.get("app_cpu_s") or {}).values()),
                           "saturated": m.get("cpu_saturated_windows"),
                           "traffic_s": m["traffic_end_t"] - m["traffic_start_t"] if "traffic_end_t" in m else None,
                           "host_qemu_cpus": m.get("host_qemu_cpus"), "host_steal": m.get("host_steal")}
    delays = []
    for e in egress_figures(run_dir):
        if e.qdisc not in ("pie", "fq_pie"):
            continue  # the return direction's FIFO
        out[f"util_{e.link}"] = e.utilization
        if e.qdisc == "pie" and e.mean_delay_ms is not None:
            target_ms = _target_ms(run_dir, e.link)
            if target_ms:
                delays.append(e.mean_delay_ms / target_ms)
    out["pie_delay_x_target"] = statistics.fmean(delays) if delays else None
    goodput = iperf3_goodput_bps(run_dir)
    out["iperf3_mbps"] = goodput / 1e6 if goodput else None
    return out


def _target_ms(run_dir: Path, link: str) -> float | None:
    for e in RunFolder(run_dir).json(LINKS)["egresses"]:
        if e["link"] == link and e.get("qdisc") == "pie":
            target = e.get("qdisc_params", {}).get("target")
            return float(target) * 1000 if target is not None else None
    return None


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def report(rows: list[dict[str, Any]]) -> None:
    rows = sorted(rows, key=lambda r: r["started"])  # the order they ran in
    print("  ".join(f"{h:>12}" for h in ("run", "runs_before", *FIGURES)))
    for r in rows:
        print("  ".join([f"{r['run'][-12:]:>12}", f"{_fmt(r['runs_before']):>12}",
                         *(f"{_fmt(r.get(h)):>12}" for h in FIGURES)]))
    first, rest = rows[0], rows[1:]
    if len(rest) < 2:
        print("(need at least 3 runs to compare the first with the spread of the others)")
        return
    print(f"\nfirst run ({first['run']}, runs_before={first['runs_before']}) against the other {len(rest)}:")
    for h in FIGURES:
        values = [float(r[h]) for r in rest if r.get(h) is not None]
        if first.get(h) is None or len(values) < 2:
            continue
        mean, sd = statistics.fmean(values), statistics.stdev(values)
        z = abs(float(first[h]) - mean) / sd if sd > 0 else float("inf") if first[h] != mean else 0.0
        print(f"  {h:<20} first {float(first[h]):8.2f}   others {mean:8.2f} +- {sd:6.2f}   |z| {z:5.2f}   "
              f"ratio {float(first[h]) / mean if mean else float('nan'):5.2f}")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--cell", default="kind-pie_target-5ms", help="a run name of the default sweep, without _rN")
    p.add_argument("--no-warmup", action="store_true", help="NEST_EXP_WARMUP=0: no warm-up before the first run")
    p.add_argument("--folder", type=Path, help="only read this finished sweep's run folders")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed on to run --set")
    args = p.parse_args()
    if args.folder:
        report([figures(m.parent) for m in args.folder.glob(f"*/{MANIFEST}")])
        return 0
    env = {**os.environ, **({"NEST_EXP_WARMUP": "0"} if args.no_warmup else {})}
    with tempfile.TemporaryDirectory(prefix="nx-bench-", dir="/var/tmp") as tmp:
        argv = [sys.executable, "-m", "nest_experiments", "run", "--runtime", "vm", "--results", tmp, "--no-plot",
                "--reps", str(args.reps), *(a for i in range(1, args.reps + 1) for a in ("--only", f"{args.cell}_r{i}")),
                *(a for kv in args.set for a in ("--set", kv))]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        runs = [m.parent for m in Path(tmp).glob(f"*/*/{MANIFEST}")]
        if proc.returncode != 0 or not runs:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        print(f"{args.reps} runs of {args.cell} in one VM, warm-up {'off' if args.no_warmup else 'on'}")
        report([figures(r) for r in runs])
    return 0


if __name__ == "__main__":
    sys.exit(main())
