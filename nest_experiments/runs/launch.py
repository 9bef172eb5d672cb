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
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from nest_experiments.config import load_default_raw, read_toml
from nest_experiments.config.sweep import RunSpec, apply_overrides, apply_paper, expand
from nest_experiments.errors import NestExpError
from nest_experiments.runs import runtime
from nest_experiments.runs.outcome import exit_code, now_iso
from nest_experiments.runs.phases import append_sweep_record, new_sweep_id
from nest_experiments.runs.preflight import preflight
from nest_experiments.units import parse_time

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


def run_command(args: argparse.Namespace, *, router: Any = None) -> int:
    """``run``; ``router``: the router runtime's guest, when a caller (``--until-decided``'s blocks) holds one."""
    if getattr(args, "until_decided", False):
        return _until_decided(args)
    if getattr(args, "continue_from", None):
        raise NestExpError("--continue-from goes with --until-decided (it goes on from committed evidence until "
                           "the claims are decided)")
    raw, runs = load_runs(args)
    preflight(runs)  # this machine's players and tools, before anything is created (--check too)
    results = (args.results or _default_results()).resolve()
    if args.check:
        for r in runs:
            print(f"{r.experiment.name}/{r.name}")
        return 0
    if getattr(args, "cluster", None):
        return _run_on_cluster(args, runs, results)
    if os.geteuid() != 0:
        raise NestExpError("running an experiment needs root (network namespaces): use sudo")
    where = runtime.choose(args.runtime or runs[0].experiment.runtime, runs)
    quick = ("" if getattr(args, "in_block", False) or runtime.current() == "vm"
             else quick_look_note(raw, paper=bool(getattr(args, "paper", False))))
    if quick:  # once the runs are sure to start (an error before stays the command's one line)
        print(quick, file=sys.stderr, flush=True)
    if where == "vm":
        return _run_in_vm(args, runs, results)
    from nest_experiments.runs.runner import run_sweep

    sweep_id = new_sweep_id()
    t0 = time.monotonic()
    with _router(runs) if where == "router" and router is None else contextlib.nullcontext(router) as guest:
        outcomes = run_sweep(runs, results_root=results, warmup_s=runtime.warmup_s(), sweep_id=sweep_id,
                             router=guest)
    if not args.no_plot and runtime.current() != "vm":
        t_plot = time.monotonic()
        _plot(results / runs[0].experiment.name)
        append_sweep_record(results / runs[0].experiment.name,  # the plot's share of runs.phases' sweep log
                            {"id": sweep_id, "side": "host", "plot": round(time.monotonic() - t_plot, 3),
                             "command_s": round(time.monotonic() - t0, 3)})
    elif runtime.current() != "vm" and not getattr(args, "in_block", False):
        _say_saturation(results / runs[0].experiment.name)
    return exit_code(outcomes)


def quick_look_note(raw: dict[str, Any], *, paper: bool) -> str:
    """For a file with a ``[paper]`` table run without ``--paper``: say that this is a reduced design, and which
    of the paper's values it changes ('' otherwise)."""
    table = raw.get("paper")
    if paper or not isinstance(table, dict) or not table:
        return ""
    keys = [k for k in table if k not in ("sweep", "sweep_repeat")]
    shown = ", ".join(f"{k} = {table[k]}" for k in keys[:4]) + (", ..." if len(keys) > 4 else "")
    return f"a quick look at a reduced design, not the paper's: `run --paper` runs the paper's ({shown})"


@contextlib.contextmanager
def _router(runs: list[RunSpec]) -> Iterator[Any]:
    """The router runtime's guest for ``runs`` (vm.router): booted once, shut down whatever happens."""
    from nest_experiments.net.routed import check_capacity
    from nest_experiments.vm.router import RouterVM

    missing, slots = runtime.router_plan(runs)
    for r in runs:  # what the guest cannot forward is refused before anything starts
        check_capacity(r.experiment.duration_s, r.experiment.links, missing)
    if slots == 0:
        yield None  # nothing needs the guest: every link is the host's
        return
    print(f"router runtime: the apps on the host, {slots} link(s) per run through one guest for what this kernel "
          f"lacks ({', '.join(sorted(missing))})", file=sys.stderr, flush=True)
    with RouterVM(slots=slots, missing=missing) as guest:
        print(f"router runtime: guest up in {guest.boot_s:.1f} s (clock offset known to "
              f"{guest.offset_error_s * 1e3:.2f} ms)", file=sys.stderr, flush=True)
        yield guest


def _until_decided(args: argparse.Namespace) -> int:
    """``--until-decided``: block after block (each through this same command, with ``--reps`` the block and
    ``--only`` its runs: host, VM or cluster alike) until the study's claims are decided (runs.until_decided)."""
    from nest_experiments.runs.until_decided import Budget, block_runs, committed_runs, run_until_decided, study_of

    if args.reps is not None or args.only:
        raise NestExpError("--until-decided picks the blocks and runs itself: drop --reps / --only (use --max-reps)")
    if args.max_reps is not None and args.max_reps < 1:
        raise NestExpError("--max-reps must be at least 1")
    seconds = parse_time("--budget", args.budget, allow_zero=False) if args.budget else None
    budget = Budget(seconds=seconds, max_reps=args.max_reps or Budget().max_reps)
    raw, _ = load_runs(argparse.Namespace(**{**vars(args), "until_decided": False}))
    first = block_runs(raw, 1)
    study = study_of(first[0].experiment.name)  # an experiment without claims stops here, before anything runs
    preflight(first)
    results = (args.results or _default_results()).resolve()
    folder = results / first[0].experiment.name
    if getattr(args, "continue_from", None):  # the evidence fits this sweep, before anything runs
        from nest_experiments.reports import evidence

        committed_runs(raw, evidence.committed_sessions(args.continue_from, first[0].experiment.name))
        if not args.check:
            evidence.adopt(args.continue_from, folder)
    if args.check:
        for r in first:
            print(f"{r.experiment.name}/{r.name}")
        print(f"block 1 of at most {budget.max_reps}; {len(study.claims_for(first[0].experiment.name))} claims "
              f"({study.name})", file=sys.stderr)
        return 0
    codes: list[int] = []
    # the blocks' runtime (a cell key of the sessions): a cluster's workers choose their own, so there only a
    # runtime the file or --runtime names
    wanted = args.runtime or first[0].experiment.runtime
    where = wanted if getattr(args, "cluster", None) else runtime.choose(wanted, first)

    def block_args(runs: list[RunSpec]) -> argparse.Namespace:
        return argparse.Namespace(**{**vars(args), "until_decided": False, "reps": runs[0].repetition, "in_block": True,
                                     "only": [r.name for r in runs], "no_plot": True, "continue_from": None})

    def drive(run_block: Callable[[list[RunSpec]], int]) -> None:
        def counted(runs: list[RunSpec]) -> int:
            codes.append(run_block(runs))
            return codes[-1]

        run_until_decided(raw, folder=folder, execute=counted, budget=budget, study=study,
                          runtime=where if where in ("host", "router", "vm") else None)

    in_vm = not getattr(args, "cluster", None) and os.geteuid() == 0 and where == "vm"
    if in_vm:  # one VM for every block (runs.blocks_in_vm)
        _until_decided_in_vm(args, results, budget, first, block_args, drive)
    elif where == "router" and not getattr(args, "cluster", None):  # one router guest for every block
        with _router(first) as guest:
            drive(lambda runs: run_command(block_args(runs), router=guest))
    else:  # each block through this same command: host, or a cluster
        drive(lambda runs: run_command(block_args(runs)))
    if not args.no_plot:
        _plot(folder)
    elif folder.is_dir():
        _say_saturation(folder)
    return max(codes, default=0)


def _until_decided_in_vm(args: argparse.Namespace, results: Path, budget: Any, first: list[RunSpec],
                         block_args: Callable[[list[RunSpec]], argparse.Namespace],
                         drive: Callable[[Callable[[list[RunSpec]], int]], None]) -> None:
    """The blocks of ``--until-decided`` in one VM (runs.blocks_in_vm): the guest serves an inbox in the results
    folder; each block's runs are prepared, matched and annotated on the host as a VM sweep's are."""
    from nest_experiments.net.procs import run_lock
    from nest_experiments.runs.blocks_in_vm import Blocks, drive_in_vm, new_inbox
    from nest_experiments.runs.phases import SWEEP_ID_ENV
    from nest_experiments.runs.sweep_in_vm import after_guest_runs, before_guest_runs

    results.mkdir(parents=True, exist_ok=True)
    with run_lock():
        experiment = _visible_to_guest(args.experiment.resolve(), results) if args.experiment else None
        inbox = new_inbox(results, VM_INPUTS)
        host_load: list[Any] = []
        ids: dict[int, str] = {}

        def argv(runs: list[RunSpec]) -> list[str]:
            before_guest_runs(runs)  # media and byte code, as for a VM sweep
            return [sys.executable, "-m", "nest_experiments", *_guest_args(block_args(runs), results, experiment)]

        def env(runs: list[RunSpec]) -> dict[str, str]:
            ids[runs[0].repetition] = new_sweep_id()
            return {SWEEP_ID_ENV: ids[runs[0].repetition]}

        def after(runs: list[RunSpec], record: dict[str, Any]) -> None:
            folder = results / runs[0].experiment.name
            record.update(after_guest_runs(folder, runs, list(host_load[0].samples) if host_load else []))
            append_sweep_record(folder, {"id": ids[runs[0].repetition], "side": "vm_host", "started": now_iso(),
                                         "runs": len(runs), **record})

        blocks = Blocks(inbox, block_argv=argv, after_block=after, env=env)
        timeout = budget.seconds * 2 + 1800 if budget.seconds else 48 * 3600.0
        guest = [sys.executable, "-m", "nest_experiments", "serve-blocks", str(inbox)]
        print("until decided: one VM for every block (this kernel lacks: "
              f"{runtime.missing_summary(first) or 'nothing; --runtime vm'})", file=sys.stderr,
              flush=True)
        try:
            drive_in_vm(blocks, drive, lambda: runtime.enter_vm(guest, rw_dirs=[results], timeout_s=timeout,
                                                               on_started=host_load.append))
        finally:
            shutil.rmtree(inbox, ignore_errors=True)
            _drop_guest_copy(experiment)
            with contextlib.suppress(OSError):
                (results / VM_INPUTS).rmdir()  # when no other runner's files are in it


def _run_on_cluster(args: argparse.Namespace, runs: list[RunSpec], results: Path) -> int:
    """``--cluster``: the runs as tasks on a Dask cluster (nest_experiments.runs.cluster); the same folder and report."""
    from nest_experiments.runs.cluster import parse_cluster, run_on_cluster

    address, _ = parse_cluster(args.cluster)  # a bad value stops here, before anything starts
    if address == "local" and os.geteuid() != 0:
        raise NestExpError("--cluster local:N runs the emulations on this machine: it needs root (use sudo)")
    outcomes = run_on_cluster(runs, cluster=args.cluster, results_root=results,
                              runtime=args.runtime or runs[0].experiment.runtime)
    if not args.no_plot:
        _plot(results / runs[0].experiment.name)
    return exit_code(outcomes)


def _default_results() -> Path:
    from nest_experiments.resources import results_root

    return results_root()


def _plot(folder: Path) -> None:
    """Per-run figures and the sweep's report; the command's last line says how many sessions were CPU-saturated
    and what that leaves the claims (runs.outcome.saturation_summary)."""
    from nest_experiments.analysis.utilization import print_summary
    from nest_experiments.reports.plot import plot_folder
    from nest_experiments.runs.outcome import saturation_summary

    print_summary(folder)
    pngs = plot_folder(folder)
    print(f"{len(pngs)} plots in {folder}", file=sys.stderr)
    sys.stdout.flush()  # the sweep's summary (stdout) before it, even when both streams go to one pipe
    print(saturation_summary(folder), file=sys.stderr, flush=True)


def _say_saturation(folder: Path) -> None:
    """With ``--no-plot``: the same last line as after the plots (there is no report to point to yet)."""
    from nest_experiments.runs.outcome import saturation_summary

    sys.stdout.flush()
    line = saturation_summary(folder).rsplit("; see ", 1)[0]
    print(f"{line}; no report (--no-plot): `plot {folder}` writes it", file=sys.stderr, flush=True)


def _run_in_vm(args: argparse.Namespace, runs: list[RunSpec], results: Path) -> int:
    from nest_experiments.net.procs import run_lock

    with run_lock():  # the guest has its own /run: without this a host emulation could start beside the VM
        return _run_in_vm_locked(args, runs, results)


def _run_in_vm_locked(args: argparse.Namespace, runs: list[RunSpec], results: Path) -> int:
    from nest_experiments.runs.sweep_in_vm import run_in_guest

    results.mkdir(parents=True, exist_ok=True)
    experiment = _visible_to_guest(args.experiment.resolve(), results) if args.experiment else None
    argv = [sys.executable, "-m", "nest_experiments", *_guest_args(args, results, experiment)]
    record: dict[str, Any] = {"id": new_sweep_id(), "side": "vm_host", "started": now_iso(), "runs": len(runs)}
    t0 = time.monotonic()
    try:
        code = run_in_guest(argv, runs, results, record=record)
    finally:
        _drop_guest_copy(experiment)
    if not args.no_plot:
        t_plot = time.monotonic()
        _plot(results / runs[0].experiment.name)
        record["plot"] = round(time.monotonic() - t_plot, 3)
    elif not getattr(args, "in_block", False):
        _say_saturation(results / runs[0].experiment.name)
    record["command_s"] = round(time.monotonic() - t0, 3)
    append_sweep_record(results / runs[0].experiment.name, record)  # the host's side of runs.phases' sweep log
    return code


def _drop_guest_copy(experiment: Path | None) -> None:
    """Remove the copy :func:`_visible_to_guest` made (and its folder, when no other runner's copy is in it)."""
    if experiment is not None and experiment.parent.name == VM_INPUTS:
        experiment.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            experiment.parent.rmdir()


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
