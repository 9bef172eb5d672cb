"""Queue delay from captures (the FQ-PIE method) checked against PIE's own delay, in the VM runtime.

    sudo .venv/bin/python bench/qdelay_method.py [--reps 2] [--duration 20s] [--overhead]

The repeatable setting of DESIGN §2b: dumbbell, HTB 10 Mbit/s, PIE / FQ-PIE
at a 5 ms target, 5 CUBIC iperf3 flows h1 -> s1, 20 ms netem on the return
path. The sweep runs in one VM with ``qdelay_links = ["bottleneck"]``; the
pcaps are matched on the host after the VM exits (``launch.py``), exactly as
a user's sweep. Prints, per run: PIE's own mean delay (qdisc.csv, steady
window), the capture method's mean computed PIE's way (sojourn of the last
packet out, 0 when the queue is empty, at the sampler's instants) and per
packet, their ratios to PIE's, the matched fraction, unmatched ingress
packets vs the qdisc's drops, p95, goodput, pcap size. ``--overhead`` runs
the same sweep again without captures and prints the goodput ratio.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "pie_dumbbell.toml"  # DESIGN §2b's setting, PIE and FQ-PIE


def run_args(*, duration: str, reps: int, capture: bool) -> list[str]:
    """``run`` on the shipped setting, renamed, with the capture switched on or off."""
    args = [str(EXPERIMENT), "--reps", str(reps), "--set", "experiment.name=qdelay_method",
            "--set", f"experiment.duration={duration}"]
    return args + (["--set", 'experiment.qdelay_links=["bottleneck"]'] if capture else [])


def sweep(tmp: Path, *, duration: str, reps: int, capture: bool) -> tuple[Path, float]:
    results = tmp / ("with" if capture else "without")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "nest_experiments", "run",
                           *run_args(duration=duration, reps=reps, capture=capture), "--runtime", "vm",
                           "--results", str(results), "--no-plot"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
    return results / "qdelay_method", time.monotonic() - t0


def goodput(run_dir: Path) -> float | None:
    from nest_experiments.analysis.utilization import iperf3_goodput_bps

    return iperf3_goodput_bps(run_dir)


def report(folder: Path) -> dict[str, float]:
    from nest_experiments.rundir import MANIFEST, QDELAY_SUMMARY, RunFolder, run_dirs

    gps = {}
    print(f"{'run':<16} {'PIE own':>8} {'PIE-way':>8} {'ratio':>6} {'per-pkt':>8} {'ratio':>6} {'p95':>7} "
          f"{'matched':>8} {'unm.in':>7} {'drops':>6} {'goodput':>8} {'pcap MB':>7} {'match s':>7}")
    for run_dir in run_dirs(folder):
        gp = goodput(run_dir)
        gps[run_dir.name] = gp or float("nan")
        run = RunFolder(run_dir)
        if not run.has(QDELAY_SUMMARY):
            print(f"{run_dir.name:<16} (no capture) goodput {gp / 1e6 if gp else float('nan'):.2f} Mbit/s")
            continue
        summary = run.json(QDELAY_SUMMARY)
        for s in summary["egresses"]:
            k = s.get("kernel_mean_delay_ms")
            print(f"{run_dir.name:<16} {_f(k):>8} {_f(s['mean_pie_style_ms']):>8} {_f(s.get('ratio_pie_style_to_kernel'), 3):>6} "
                  f"{_f(s['mean_per_packet_ms']):>8} {_f(s.get('ratio_per_packet_to_kernel'), 3):>6} {_f(s['p95_ms']):>7} "
                  f"{s['matched_fraction']:>8.4f} {s['unmatched_ingress']:>7} {s['qdisc_drops']!s:>6} "
                  f"{_f(gp / 1e6 if gp else None):>8} {summary.get('capture_bytes', 0) / 1e6:>7.1f} "
                  f"{summary.get('match_s', float('nan')):>7.2f}")
        warnings = [w for w in run.json(MANIFEST).get("warnings", []) if "qdelay" in w]
        for w in warnings:
            print(f"  warning: {w}")
    return gps


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--duration", default="20s")
    p.add_argument("--overhead", action="store_true", help="also run without captures and compare goodput")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="nx-bench-", dir="/var/tmp") as tmp:
        folder, wall = sweep(Path(tmp), duration=args.duration, reps=args.reps, capture=True)
        print(f"with captures: {wall:.0f} s for the VM sweep; delays in ms (PIE own = qdisc.csv's delay, steady window)")
        with_gp = report(folder)
        if args.overhead:
            folder, wall = sweep(Path(tmp), duration=args.duration, reps=args.reps, capture=False)
            print(f"without captures: {wall:.0f} s")
            without_gp = report(folder)
            for name, gp in with_gp.items():
                if name in without_gp:
                    print(f"{name}: goodput with / without captures = {gp / without_gp[name]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
