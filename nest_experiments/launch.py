"""``run``: load and validate everything, pick the runtime, run the sweep, plot.

Validation (config, sweep, kernel features, tools) happens before any
namespace exists. With ``--runtime vm`` (or ``auto`` on a kernel without the
qdiscs) the same command runs inside one VM for the whole sweep, with the
results folder shared read-write.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nest_experiments.config import load_default_raw, read_toml
from nest_experiments.errors import NestExpError
from nest_experiments.net.kernel import missing_on_host, require_host_features
from nest_experiments.sweep import RunSpec, apply_overrides, apply_paper, expand

if TYPE_CHECKING:
    from nest_experiments.vm.hostload import HostSample

VM_TIMEOUT_MARGIN_S = 600.0
VM_INPUTS = ".vm-inputs"  # in the results folder: files the guest must read that lie where it cannot see them


def load_runs(args: argparse.Namespace) -> tuple[dict[str, Any], list[RunSpec]]:
    raw = read_toml(args.experiment) if args.experiment else load_default_raw()
    if getattr(args, "paper", False):
        raw = apply_paper(raw)
    raw = apply_overrides(raw, list(args.set))
    if args.reps is not None and args.reps < 1:
        raise NestExpError("--reps must be at least 1")
    runs = expand(raw, repetitions=args.reps)
    if args.only:
        prefix = f"{runs[0].experiment.name}/" if runs else ""  # as `--check` lists them: EXPERIMENT/RUN
        only = {o.removeprefix(prefix) for o in args.only}
        unknown = sorted(only - {r.name for r in runs})
        if unknown:
            raise NestExpError(f"--only: no run named {', '.join(unknown)}; runs: {', '.join(r.name for r in runs)}")
        runs = [r for r in runs if r.name in only]
    return raw, runs


def choose_runtime(args: argparse.Namespace, runs: list[RunSpec]) -> str:
    wanted = args.runtime or runs[0].experiment.runtime
    if os.environ.get("NEST_EXP_RUNTIME") == "vm":
        return "host"  # we are the guest
    if wanted == "auto":
        return "vm" if any(missing_on_host(r.experiment) for r in runs) else "host"
    if wanted == "host":
        for r in runs:
            require_host_features(r.experiment)
    return wanted


def run_command(args: argparse.Namespace) -> int:
    _, runs = load_runs(args)
    results = (args.results or _default_results()).resolve()
    if args.check:
        for r in runs:
            print(f"{r.experiment.name}/{r.name}")
        return 0
    if getattr(args, "cluster", None):
        return _run_on_cluster(args, runs, results)
    if os.geteuid() != 0:
        raise NestExpError("running an experiment needs root (network namespaces): use sudo")
    runtime = choose_runtime(args, runs)
    if runtime == "vm":
        return _run_in_vm(args, runs, results)
    from nest_experiments.runner import run_sweep

    warmup = float(os.environ.get("NEST_EXP_VM_WARMUP_S", "0")) if os.environ.get("NEST_EXP_RUNTIME") == "vm" else 0.0
    outcomes = run_sweep(runs, results_root=results, warmup_s=warmup)
    if not args.no_plot and os.environ.get("NEST_EXP_RUNTIME") != "vm":
        _plot(results / runs[0].experiment.name)
    return 1 if any(o.status == "failed" for o in outcomes) else 0


def _run_on_cluster(args: argparse.Namespace, runs: list[RunSpec], results: Path) -> int:
    """``--cluster``: the runs as tasks on a Dask cluster (nest_experiments.cluster); the same folder and report."""
    from nest_experiments.cluster import parse_cluster, run_on_cluster

    address, _ = parse_cluster(args.cluster)  # a bad value stops here, before anything starts
    if address == "local" and os.geteuid() != 0:
        raise NestExpError("--cluster local:N runs the emulations on this machine: it needs root (use sudo)")
    outcomes = run_on_cluster(runs, cluster=args.cluster, results_root=results,
                              runtime=args.runtime or runs[0].experiment.runtime)
    if not args.no_plot:
        _plot(results / runs[0].experiment.name)
    return 1 if any(o.status == "failed" for o in outcomes) else 0


def _default_results() -> Path:
    from nest_experiments.runner import RESULTS_ROOT

    return RESULTS_ROOT


def _plot(folder: Path) -> None:
    from nest_experiments.analysis import print_summary
    from nest_experiments.plot import plot_folder

    print_summary(folder)
    pngs = plot_folder(folder)
    print(f"{len(pngs)} plots in {folder}", file=sys.stderr)


def _run_in_vm(args: argparse.Namespace, runs: list[RunSpec], results: Path) -> int:
    results.mkdir(parents=True, exist_ok=True)
    experiment = _visible_to_guest(args.experiment.resolve(), results) if args.experiment else None
    argv = [sys.executable, "-m", "nest_experiments", *_guest_args(args, results, experiment)]
    try:
        code = run_in_guest(argv, runs, results)
    finally:
        if experiment is not None and experiment.parent.name == VM_INPUTS:
            experiment.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                experiment.parent.rmdir()  # when no other runner's copy is in it
    if not args.no_plot:
        _plot(results / runs[0].experiment.name)
    return code


def run_in_guest(argv: list[str], runs: list[RunSpec], results: Path) -> int:
    """Run ``argv`` (a ``nest_experiments`` command that runs ``runs`` into ``results``) in one VM, with
    ``results`` writable; then, on the host, match the runs' captures and add the host's load to their
    manifests. Returns the guest command's exit code."""
    from nest_experiments.vm import run_in_vm, vm_settings

    _prepare_on_host(runs)
    _compile_for_guest()
    from nest_experiments.runner import queue_grace_s  # the runner (apps, collectors) only when a VM runs

    budget = sum((r.experiment.duration_s + 60) * 3 + queue_grace_s(r.experiment) for r in runs) + VM_TIMEOUT_MARGIN_S
    print(f"running {len(runs)} run(s) in a VM (this kernel lacks: "
          f"{', '.join(sorted({f for r in runs for f in missing_on_host(r.experiment)})) or 'nothing; --runtime vm'})",
          file=sys.stderr, flush=True)
    vm = vm_settings()
    env = {"NEST_EXP_RUNTIME": "vm", **vm.guest_env(), "PYTHONDONTWRITEBYTECODE": "1"}
    result = run_in_vm(argv, cwd=Path.cwd(), rw_dirs=[results], env=env, timeout_s=budget, accel=vm.accel,
                       keep_host_awake=vm.host_awake, softirq_fifo=vm.softirq_fifo)
    from nest_experiments.collectors.capture import match_sweep_captures

    match_sweep_captures(results / runs[0].experiment.name)  # pcaps of the guest's runs, matched here on the host
    _host_load_into_manifests(results / runs[0].experiment.name, list(result.host_samples))
    return result.exit_code


def _host_load_into_manifests(folder: Path, samples: list[HostSample]) -> None:
    """Each run of this VM's sweep gets the host's steal and qemu's CPU during its traffic (vm.hostload)."""
    from nest_experiments.rundir import read_manifest, write_json
    from nest_experiments.vm.hostload import STEAL_WARN, annotate

    for path in sorted(folder.glob("*/manifest.json")):
        manifest = read_manifest(path.parent)
        if manifest is not None and annotate(manifest, samples):
            write_json(path, manifest)
            if manifest["host_steal"] >= STEAL_WARN:
                print(f"{path.parent.name}: the host's hypervisor took {manifest['host_steal']:.0%} of its CPU "
                      "during the run (manifest: host_steal)", file=sys.stderr, flush=True)


def _prepare_on_host(runs: list[RunSpec]) -> None:
    """What the guest cannot do, because it sees the project read-only (e.g. generate DASH media)."""
    import nest_experiments.runner  # noqa: F401  (registers every app kind)
    from nest_experiments.apps.base import APP_CLASSES

    for r in runs:
        for app in r.experiment.apps:
            APP_CLASSES[app.kind].prepare_host(app)


def _compile_for_guest() -> None:
    """Byte-compile the project on the host: the guest sees it read-only (and runs with
    PYTHONDONTWRITEBYTECODE), so every Python process it starts (the runner, each run's DASH server and
    player) would otherwise compile the modules it imports again, at TCG's ~8x slower speed."""
    import compileall

    import nest_experiments

    compileall.compile_dir(Path(nest_experiments.__file__).parent, quiet=1)  # a read-only install: nothing to do


def _visible_to_guest(experiment: Path, results: Path) -> Path:
    """The experiment file, or a copy of it in the results folder when it lies where the guest has its own
    file system (e.g. /tmp); the copy is removed after the VM run, or by the next one after a kill -9."""
    from nest_experiments.vm.qemu import clean_stale, guest_private_root

    inputs = results / VM_INPUTS
    clean_stale(inputs)
    if guest_private_root(experiment) is None:
        return experiment
    inputs.mkdir(exist_ok=True)
    copy = inputs / f"{os.getpid()}-{experiment.name}"
    copy.write_bytes(experiment.read_bytes())
    return copy


def _guest_args(args: argparse.Namespace, results: Path, experiment: Path | None = None) -> list[str]:
    out = ["run", "--runtime", "host", "--results", str(results), "--no-plot"]
    if experiment is not None:
        out.insert(1, str(experiment))
    if args.reps is not None:
        out += ["--reps", str(args.reps)]
    if args.paper:
        out.append("--paper")
    for item in args.set:
        out += ["--set", item]
    for name in args.only:
        out += ["--only", name]
    return out
