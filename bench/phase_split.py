"""Where a sweep's wall time goes: the phase split of every run and of the sweep around them (issue 31).

    sudo .venv/bin/python bench/phase_split.py --run [EXPERIMENT.toml] [--results DIR] [RUN ARGS: --only R ...]
    .venv/bin/python bench/phase_split.py results/nest_paper          # only read a finished sweep

``--run`` runs the experiment (default: the built-in one, the NeST paper's
reduced sweep) into a fresh results folder (``--results``, default a new
folder under /var/tmp) and then reads it. Reading prints, per sweep command
(``sweeps.jsonl``, runs.phases): the host's preparation, the VM image and
accelerator check (a new clone builds the image and probes KVM, ~26 s here),
the VM's boot, the guest's Python start, the warm-up, the runs, the time between runs, the
VM's power-off, the host's capture matching and load annotation, the plot;
the whole command over the configured traffic time (the runs' ``duration``:
the ratio issue 31 asks to bring to <= 1.3); and per run phase (manifests'
``phases``) the mean, min and max over the runs, with each phase's share of
a run, the topology's steps (``topology_s``), the apps' ``prepare`` and ``start`` times and how many of their
Python programs started warm (net.warm; ``NEST_EXP_WARM=0`` in the
environment runs them cold, the split before it). Last, the CPU guard's saturated 1 s
windows (machine rule and per-process rule) over the runs, and where the CPU went (the apps, the runner's
threads, the kernel's softirq threads, the busiest window of the start against the rest).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nest_experiments.analysis.decisions import saturated_windows  # noqa: E402
from nest_experiments.rundir import MANIFEST  # noqa: E402
from nest_experiments.runs.phases import read_sweep_records  # noqa: E402

RUN_PHASES = ("cleanup", "topology", "app_prepare", "collectors_start", "traffic", "drain", "collection", "outputs",
              "app_stop", "teardown", "match")


def manifests(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob(f"*/{MANIFEST}")):
        m = json.loads(path.read_text())
        if m.get("status") == "completed" and "phases" in m:
            out.append(m | {"_dir": path.parent})
    return out


def sweeps(folder: Path) -> list[dict[str, Any]]:
    """One dict per sweep command: the runner's and the host's records of one id merged."""
    merged: dict[str, dict[str, Any]] = defaultdict(dict)
    for rec in read_sweep_records(folder):
        side = rec.get("side", "runner")
        merged[rec["id"]].update({f"{side}.{k}": v for k, v in rec.items() if k not in ("id", "side")})
    return [dict(v, id=k) for k, v in merged.items()]


def _line(label: str, seconds: float | None, total: float | None = None) -> str:
    if seconds is None:
        return f"  {label:<28} -"
    share = f"  {seconds / total:6.1%}" if total else ""
    return f"  {label:<28} {seconds:9.1f} s{share}"


def print_sweep(s: dict[str, Any]) -> None:
    traffic = s.get("runner.traffic_s") or 0.0
    n = s.get("runner.runs_executed", 0)
    runtime = s.get("runner.runtime", "?")
    command = s.get("vm_host.command_s") or s.get("host.command_s")
    runner_wall = s.get("runner.wall_s")
    print(f"sweep {s['id']} ({'vm' if 'vm_host.vm' in s else runtime}, {n} runs, {traffic:.0f} s of traffic)")
    total = command or runner_wall
    rows: list[tuple[str, float | None]] = []
    if "vm_host.vm" in s:
        vm = s["vm_host.vm"]
        setup = s.get("vm_host.setup")  # None in records before it was timed: then in the exit's residual
        boot = s.get("vm_host.boot")
        py = s.get("runner.guest_python_start_s")
        poweroff = s.get("vm_host.poweroff")
        after = vm - (setup or 0) - (boot or 0) - (py or 0) - (runner_wall or 0) - (poweroff or 0)
        rows += [("host: media, byte code", s.get("vm_host.prepare")), ("VM image, accelerator check", setup),
                 ("VM boot (to the guest's init)", boot), ("guest Python start", py)]
    rows += [("warm-up", s.get("runner.warmup")), ("runs", s.get("runner.runs")),
             ("between runs (runner)", s.get("runner.between_s"))]
    if "vm_host.vm" in s:
        rows += [("guest command's exit", after), ("guest sync, power-off", poweroff),
                 ("host: match captures", s.get("vm_host.match")),
                 ("host: load into manifests", s.get("vm_host.annotate"))]
    rows.append(("plot", s.get("vm_host.plot", s.get("host.plot"))))
    for label, sec in rows:
        print(_line(label, sec, total))
    if total:
        print(_line("command, start to end", total))
        ratio = f"{total / traffic:.2f}" if traffic else "-"
        plot = s.get("vm_host.plot", s.get("host.plot")) or 0.0
        no_plot = f"{(total - plot) / traffic:.2f}" if traffic else "-"
        print(f"  wall / traffic: {ratio} ({no_plot} without the plot); runs alone: "
              f"{(s.get('runner.runs') or 0) / traffic:.2f}" if traffic else "  (no traffic)")


TOPOLOGY_STEPS = ("nest", "nodes", "verify", "links", "firewalls")  # net.network.Network._build


def print_runs(ms: list[dict[str, Any]]) -> None:
    if not ms:
        print("no completed run with phases")
        return
    totals = [sum(m["phases"].values()) for m in ms]
    mean_total = statistics.mean(totals)
    print(f"\nper run ({len(ms)} runs; {mean_total:.1f} s on average, duration {statistics.mean(m['duration_s'] for m in ms):.0f} s)")
    print(f"  {'phase':<18} {'mean':>8} {'min':>8} {'max':>8}  share")
    names = [p for p in RUN_PHASES if any(p in m["phases"] for m in ms)]
    names += sorted({p for m in ms for p in m["phases"]} - set(names))
    for p in names:
        vals = [m["phases"].get(p, 0.0) for m in ms]
        print(f"  {p:<18} {statistics.mean(vals):8.2f} {min(vals):8.2f} {max(vals):8.2f}  "
              f"{statistics.mean(vals) / mean_total:5.1%}")
    for key, label in (("topology_s", "topology's steps"),
                       ("app_prepare_s", "apps' prepare (their servers started and ready)"),
                       ("app_start_s", "apps' start (inside traffic)")):
        per_app: dict[str, list[float]] = defaultdict(list)
        for m in ms:
            for app, sec in (m.get(key) or {}).items():
                per_app[app].append(sec)
        if per_app:
            order = TOPOLOGY_STEPS if key == "topology_s" else sorted(per_app)  # the build's steps in its order
            items = [(a, per_app[a]) for a in order if a in per_app] + sorted(
                (a, v) for a, v in per_app.items() if a not in order)
            print(f"  {label}: " + ", ".join(f"{a} {statistics.mean(v):.2f} s" for a, v in items))
    warm = [len(m["warm_started"]) for m in ms if "warm_started" in m]
    print(f"  warm Python starts (net.warm): {sum(warm)} in {len(warm)} runs" if warm else
          "  warm Python starts (net.warm): not recorded (before them, or NEST_EXP_WARM=0)")
    by_rule: dict[str, int] = defaultdict(int)
    for m in ms:
        for rule, count in ((m.get("cpu") or {}).get("saturated_by") or {}).items():
            by_rule[rule] += int(count or 0)
    any_rule = [saturated_windows(m) for m in ms]
    rules = ", ".join(f"{rule} rule {count}" for rule, count in sorted(by_rule.items())) or "no per-rule record"
    print(f"\nCPU-saturated 1 s windows: {sum(any_rule)} in {sum(1 for a in any_rule if a)} of {len(ms)} runs "
          f"({rules})")


def _mean_of(ms: list[dict[str, Any]], key: str) -> dict[str, float]:
    """Per name, the mean over the runs of the manifests' ``key`` (a name -> CPU seconds mapping)."""
    per: dict[str, list[float]] = defaultdict(list)
    for m in ms:
        for name, sec in (m.get(key) or {}).items():
            per[name].append(float(sec))
    return {name: statistics.mean(v) for name, v in sorted(per.items())}


def _busy(run_dir: Path) -> list[tuple[float, float]]:
    path = run_dir / "cpu.csv"
    if not path.is_file():
        return []
    rows = path.read_text().splitlines()[1:]
    return [(float(t), float(b)) for t, b in (r.split(",") for r in rows if r)]


def print_cpu(ms: list[dict[str, Any]]) -> None:
    """Where the CPU of a run goes (in the guest, for the VM runtime): the machine's mean busy fraction, the
    apps' and the runner's threads' CPU seconds, the kernel's softirq threads; and the busiest 1 s window of
    the first 6 s (the apps' starts) against the rest of the run."""
    if not ms:
        return
    mean = [m["cpu_mean"] for m in ms if "cpu_mean" in m]
    busy = f", machine busy {statistics.mean(mean):.1%} on average" if mean else ""
    print(f"\nCPU per run (mean of {len(ms)}; CPU seconds){busy}")
    for key, label in (("app_cpu_s", "apps"), ("runner_threads_cpu_s", "runner's threads")):
        per = _mean_of(ms, key)
        if per:
            print(f"  {label + ':':<18} " + ", ".join(f"{n} {v:.2f}" for n, v in per.items())
                  + f"; all {sum(per.values()):.1f}")
    top = _mean_of(ms, "cpu_top_s")
    soft = sum(v for n, v in top.items() if n.startswith("ksoftirqd/"))
    if top:
        print(f"  {'ksoftirqd:':<18} {soft:.2f}")
    early, late = [], []
    for m in ms:
        busy = _busy(m["_dir"])
        early += [max((b for t, b in busy if t <= 6.0), default=0.0)]
        late += [max((b for t, b in busy if t > 6.0), default=0.0)]
    if any(early):
        print(f"  busiest window, t <= 6 s: mean {statistics.mean(early):.3f}, max {max(early):.3f}; "
              f"after: mean {statistics.mean(late):.3f}, max {max(late):.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, help="an experiment's results folder to read")
    ap.add_argument("--run", nargs="?", const="", metavar="EXPERIMENT", help="run EXPERIMENT (default: the default)")
    ap.add_argument("--results", type=Path, help="with --run: the results root (default: a new folder in /var/tmp)")
    args, extra = ap.parse_known_args()  # with --run: the rest are `run`'s own arguments (--only, --set, ...)
    if extra and args.run is None:
        ap.error(f"unrecognized arguments: {' '.join(extra)}")
    folder = args.folder
    if args.run is not None:
        results = args.results or Path(tempfile.mkdtemp(prefix="phase-split-", dir="/var/tmp"))
        cmd = [sys.executable, "-m", "nest_experiments", "run", *([args.run] if args.run else []),
               "--results", str(results), *extra]
        print("$ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=False)
        folders = [p for p in results.iterdir() if p.is_dir() and not p.name.startswith(".")] if results.is_dir() else []
        if len(folders) != 1:
            print(f"expected one experiment folder in {results}, found {len(folders)}", file=sys.stderr)
            return 1
        folder = folders[0]
    if folder is None:
        ap.error("give a results folder, or --run")
    for s in sweeps(folder):
        print_sweep(s)
    ms = manifests(folder)
    print_runs(ms)
    print_cpu(ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
