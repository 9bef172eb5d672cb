"""Trace fidelity: a saturated trace-driven link, delivered / trace per 1 s window, for each built-in trace.

    sudo .venv/bin/python bench/trace_fidelity.py [--traces dh,dl,dvl,h2eval,fcc,hsdpa] [--duration 60s]
        [--time-scale X] [--rate-scale X] [--flows 5] [--runtime host|vm]

The dumbbell's bottleneck (forward r1 -> r2) follows each trace (HTB class
changed over netlink every ``trace_step``, 100 ms; a pfifo leaf of
``--limit`` packets, default 20: at DVL's 64 kbit/s each packet queued is
0.19 s) while ``--flows`` CUBIC iperf3 flows from h1 to s1 keep it
saturated, for ``--duration``. (iperf3's closing messages cross that queue
after the run's duration: the runner's finish grace grows with it,
:func:`nest_experiments.runs.runner.finish_grace_s`.) The fixed patterns are compressed in time so
that one whole period fits in the run (dh 960 s, dl 1440 s, dvl 480 s,
h2eval 300 s: the time scale is printed); the synthetic families (1 s
samples) play their first ``--duration`` at 1:1. ``--time-scale`` sets one
scale for all. The trace's rates are multiplied by ``--rate-scale``.

Prints, per trace and per window (from the qdisc sample nearest to 2 s
after the start to the one nearest to 1 s before the end, about 1 s each:
see ``nest_experiments/analysis/tracecheck.py``): the trace's rate integrated over
the window's two sample instants (by scheduled time), what the leaf sent
between them, their ratio, and whether the queue was busy; then the mean ratio (all windows),
the correlation, the busy windows within bounds (5%, or 1.5 packets where
that is more: see ``nest_experiments/analysis/tracecheck.py``), the drops outside the
leaf (HTB's own) and the latest rate change.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nest_experiments.analysis.tracecheck import MEAN_TOLERANCE, Fidelity, trace_fidelity  # noqa: E402
from nest_experiments.config import traces  # noqa: E402
from nest_experiments.rundir import MANIFEST, RATES, RunFolder, read_csv, run_dirs  # noqa: E402
from nest_experiments.units import parse_time  # noqa: E402

PATTERNS = ("dh", "dl", "dvl", "h2eval")


def trace_value(name: str, duration_s: float, time_scale: float | None, rate_scale: float) -> dict[str, object]:
    scale = time_scale if time_scale is not None else 1.0
    if time_scale is None and name in PATTERNS:
        scale = min(1.0, duration_s / (traces.generate(name, seed=1).period_s or duration_s))
    return {"generator": name, "seed": 1, "time_scale": round(scale, 6), "rate_scale": rate_scale}


def experiment(args: argparse.Namespace, duration_s: float) -> str:
    values = [trace_value(n, duration_s, args.time_scale, args.rate_scale) for n in args.traces.split(",")]
    inline = ", ".join("{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in t.items()) + " }" for t in values)
    return f"""
[experiment]
name = "trace_fidelity"
duration = "{args.duration}"
sample_interval = "100ms"
[links.bottleneck.forward]
trace = {{ generator = "dh" }}
qdisc = {{ kind = "pfifo", limit = {args.limit} }}
[apps.bulk]
kind = "iperf3"
src = "h1"
dst = "s1"
flows = {args.flows}
[sweep]
"links.bottleneck.forward.trace" = [{inline}]
"""


def report(run_dir: Path, duration_s: float) -> Fidelity | None:
    manifest = RunFolder(run_dir).json(MANIFEST)
    if manifest.get("status") != "completed":
        print(f"{run_dir.name}: {manifest.get('status')}: {manifest.get('reason')}")
        return None
    start = float(manifest.get("traffic_start_t", 0.0)) + 2.0
    (fid,) = trace_fidelity(run_dir, start_s=start, end_s=duration_s - 1.0)
    print(f"\n{run_dir.name}  ({manifest['runtime']})")
    print(f"{'t':>8} {'t_end':>8} {'trace Mbit/s':>13} {'delivered':>10} {'ratio':>7} {'busy':>5}")
    for w in fid.windows:
        flag = "" if not w.busy or w.within else "  <- out of bounds"
        print(f"{w.t:8.3f} {w.t_end:8.3f} {w.trace_bps / 1e6:13.4f} {w.delivered_bps / 1e6:10.4f} {w.ratio:7.3f} "
              f"{'yes' if w.busy else 'no':>5}{flag}")
    rates = read_csv(RunFolder(run_dir).file(RATES))
    late = max((float(r["t"]) - float(r["t_scheduled"]) for r in rates[1:]), default=0.0)
    busy = fid.busy
    worst = max((abs(w.ratio - 1) for w in busy), default=float("nan"))
    print(f"mean ratio {fid.mean_ratio:.4f} (bound 1 +- {MEAN_TOLERANCE}), correlation {fid.correlation:.4f}, "
          f"busy windows within bounds {sum(w.within for w in busy)}/{len(busy)} (worst {worst:.3f}), "
          f"drops leaf {fid.leaf_drops} outside {fid.drops_outside_leaf}, rate changes {len(rates) - 1} "
          f"latest {1000 * late:.1f} ms late; iperf3 ended {manifest['traffic_end_t'] - duration_s:.1f} s after the "
          f"duration")
    return fid


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--traces", default=",".join(traces.GENERATORS))
    p.add_argument("--duration", default="60s")
    p.add_argument("--time-scale", type=float, default=None)
    p.add_argument("--rate-scale", type=float, default=1.0)
    p.add_argument("--flows", type=int, default=5)
    p.add_argument("--limit", type=int, default=20, help="packets in the pfifo leaf")
    p.add_argument("--runtime", default="host")
    p.add_argument("--results", type=Path, default=None, help="keep the run folders here (default: a temp folder)")
    args = p.parse_args()
    duration_s = parse_time("--duration", args.duration)
    with tempfile.TemporaryDirectory(prefix="nx-bench-", dir="/var/tmp") as tmp:
        out = args.results.resolve() if args.results else Path(tmp)
        exp = Path(tmp) / "trace_fidelity.toml"
        exp.write_text(experiment(args, duration_s))
        subprocess.run([sys.executable, "-m", "nest_experiments", "run", str(exp), "--runtime", args.runtime,
                        "--results", str(out), "--no-plot"], check=False)  # a failed run is reported below
        results = [(d.name, report(d, duration_s)) for d in run_dirs(out / "trace_fidelity")]
    print(f"\n{'run':<44} {'mean':>7} {'corr':>7} {'busy ok':>9} {'outside':>8}")
    for name, fid in results:
        if fid is None:
            print(f"{name:<44} failed")
            continue
        ok = f"{sum(w.within for w in fid.busy)}/{len(fid.busy)}"
        print(f"{name:<44} {fid.mean_ratio:7.4f} {fid.correlation:7.4f} {ok:>9} {fid.drops_outside_leaf:>8}")
    return 0 if all(f is not None and f.ok for _, f in results) else 1

if __name__ == "__main__":
    raise SystemExit(main())
