"""``run``: load and validate everything, pick the runtime, run the sweep, plot.

Validation (config, sweep, kernel features, tools) happens before any
namespace exists. With ``--runtime vm`` (or ``auto`` on a kernel without the
qdiscs) the same command runs inside one VM for the whole sweep, with the
results folder shared read-write.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from nest_experiments.config import load_default_raw, read_toml
from nest_experiments.config.sweep import RunSpec, apply_overrides, apply_paper, expand
from nest_experiments.errors import NestExpError
from nest_experiments.runs import runtime
from nest_experiments.runs.outcome import exit_code, now_iso
from nest_experiments.runs.phases import append_sweep_record, new_sweep_id
from nest_experiments.runs.preflight import preflight
from nest_experiments.runs.request import RunRequest
from nest_experiments.units import parse_time

VM_INPUTS = ".vm-inputs"  # in the results folder: files the guest must read that lie where it cannot see them


def load_runs(req: RunRequest) -> tuple[dict[str, Any], list[RunSpec]]:
    raw = read_toml(req.experiment) if req.experiment else load_default_raw()
    if req.paper:
        raw = apply_paper(raw)
    raw = apply_overrides(raw, list(req.overrides))
    if req.reps is not None and req.reps < 1:
        raise NestExpError("--reps must be at least 1")
    runs = expand(raw, repetitions=req.reps)
    if req.only:
        prefix = f"{runs[0].experiment.name}/" if runs else ""  # as `--check` lists them: EXPERIMENT/RUN
        only = {o.removeprefix(prefix) for o in req.only}
        unknown = sorted(only - {r.name for r in runs})
        if unknown:
            raise NestExpError(f"--only: no run named {', '.join(unknown)}; runs: {', '.join(r.name for r in runs)}")
        runs = [r for r in runs if r.name in only]
    return raw, runs


def run_command(req: RunRequest, *, router: Any = None) -> int:
    """``run``; ``router``: the router runtime's guest, when a caller (``--until-decided``'s blocks) holds one."""
    if req.until_decided:
        return _until_decided(req)
    if req.continue_from:
        raise NestExpError("--continue-from goes with --until-decided (it goes on from committed evidence until "
                           "the claims are decided)")
    raw, runs = load_runs(req)
    preflight(runs)  # this machine's players and tools, before anything is created (--check too)
    results = (req.results or _default_results()).resolve()
    if req.check:
        for r in runs:
            print(f"{r.experiment.name}/{r.name}")
        return 0
    if req.cluster:
        return _run_on_cluster(req, runs, results)
    if os.geteuid() != 0:
        raise NestExpError("running an experiment needs root (network namespaces): use sudo")
    where = runtime.choose(req.runtime or runs[0].experiment.runtime, runs)
    quick = "" if req.in_block or runtime.current() == "vm" else quick_look_note(raw, paper=req.paper)
    if quick:  # once the runs are sure to start (an error before stays the command's one line)
        print(quick, file=sys.stderr, flush=True)
    if where == "vm":
        return _run_in_vm(req, runs, results)
    from nest_experiments.runs.runner import run_sweep

    sweep_id = new_sweep_id()
    t0 = time.monotonic()
    with _router(runs) if where == "router" and router is None else contextlib.nullcontext(router) as guest:
        outcomes = run_sweep(runs, results_root=results, warmup_s=runtime.warmup_s(), sweep_id=sweep_id,
                             router=guest)
    if req.plot and runtime.current() != "vm":
        t_plot = time.monotonic()
        _plot(results / runs[0].experiment.name)
        append_sweep_record(results / runs[0].experiment.name,  # the plot's share of runs.phases' sweep log
                            {"id": sweep_id, "side": "host", "plot": round(time.monotonic() - t_plot, 3),
                             "command_s": round(time.monotonic() - t0, 3)})
    elif runtime.current() != "vm" and not req.in_block:
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

    missing, slots = runtime.router_plan(runs)
    for r in runs:  # what the guest cannot forward is refused before anything starts
        check_capacity(r.experiment.duration_s, r.experiment.links, missing)
    if slots == 0:
        yield None  # nothing needs the guest: every link is the host's
        return
    with runtime.router_guest(slots=slots, missing=missing) as guest:
        yield guest


def _until_decided(req: RunRequest) -> int:
    """``--until-decided``: block after block (each through this same command, with ``--reps`` the block and
    ``--only`` its runs: host, VM or cluster alike) until the study's claims are decided (runs.until_decided)."""
    from nest_experiments.runs.until_decided import Budget, block_runs, committed_runs, run_until_decided, study_of

    if req.reps is not None or req.only:
        raise NestExpError("--until-decided picks the blocks and runs itself: drop --reps / --only (use --max-reps)")
    if req.max_reps is not None and req.max_reps < 1:
        raise NestExpError("--max-reps must be at least 1")
    seconds = parse_time("--budget", req.budget, allow_zero=False) if req.budget else None
    budget = Budget(seconds=seconds, max_reps=req.max_reps or Budget().max_reps)
    raw, _ = load_runs(req)
    first = block_runs(raw, 1)
    study = study_of(first[0].experiment.name)  # an experiment without claims stops here, before anything runs
    preflight(first)
    results = (req.results or _default_results()).resolve()
    folder = results / first[0].experiment.name
    if req.continue_from:  # the evidence fits this sweep, before anything runs
        from nest_experiments.reports import evidence

        committed_runs(raw, evidence.committed_sessions(req.continue_from, first[0].experiment.name))
        if not req.check:
            evidence.adopt(req.continue_from, folder)
    if req.check:
        for r in first:
            print(f"{r.experiment.name}/{r.name}")
        print(f"block 1 of at most {budget.max_reps}; {len(study.claims_for(first[0].experiment.name))} claims "
              f"({study.name})", file=sys.stderr)
        return 0
    codes: list[int] = []
    # the blocks' runtime (a cell key of the sessions): a cluster's workers choose their own, so there only a
    # runtime the file or --runtime names
    wanted = req.runtime or first[0].experiment.runtime
    where = wanted if req.cluster else runtime.choose(wanted, first)

    def block_request(runs: list[RunSpec]) -> RunRequest:
        return replace(req, until_decided=False, reps=runs[0].repetition, in_block=True,
                       only=tuple(r.name for r in runs), plot=False, continue_from=None)

    def drive(run_block: Callable[[list[RunSpec]], int]) -> None:
        def counted(runs: list[RunSpec]) -> int:
            codes.append(run_block(runs))
            return codes[-1]

        run_until_decided(raw, folder=folder, execute=counted, budget=budget, study=study,
                          runtime=where if where in ("host", "router", "vm") else None, stepwise=not req.cluster)

    in_vm = not req.cluster and os.geteuid() == 0 and where == "vm"
    if in_vm:  # one VM for every block (runs.blocks_in_vm)
        _until_decided_in_vm(req, results, budget, first, block_request, drive)
    elif where == "router" and not req.cluster:  # one router guest for every block
        with _router(first) as guest:
            drive(lambda runs: run_command(block_request(runs), router=guest))
    else:  # each block through this same command: host, or a cluster
        drive(lambda runs: run_command(block_request(runs)))
    if req.plot:
        _plot(folder)
    elif folder.is_dir():
        _say_saturation(folder)
    return max(codes, default=0)


def _until_decided_in_vm(req: RunRequest, results: Path, budget: Any, first: list[RunSpec],
                         block_request: Callable[[list[RunSpec]], RunRequest],
                         drive: Callable[[Callable[[list[RunSpec]], int]], None]) -> None:
    """The blocks of ``--until-decided`` in one VM (runs.blocks_in_vm): the guest serves an inbox in the results
    folder; each block's runs are prepared, matched and annotated on the host as a VM sweep's are."""
    from nest_experiments.net.procs import run_lock
    from nest_experiments.runs.blocks_in_vm import Blocks, drive_in_vm, new_inbox
    from nest_experiments.runs.phases import SWEEP_ID_ENV
    from nest_experiments.runs.sweep_in_vm import after_guest_runs, before_guest_runs

    results.mkdir(parents=True, exist_ok=True)
    with run_lock():
        experiment = _visible_to_guest(req.experiment.resolve(), results) if req.experiment else None
        inbox = new_inbox(results, VM_INPUTS)
        host_load: list[Any] = []
        ids: dict[int, str] = {}

        def argv(runs: list[RunSpec]) -> list[str]:
            before_guest_runs(runs)  # media and byte code, as for a VM sweep
            return [sys.executable, "-m", "nest_experiments", *_guest_args(block_request(runs), results, experiment)]

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


def _run_on_cluster(req: RunRequest, runs: list[RunSpec], results: Path) -> int:
    """``--cluster``: the runs as tasks on a Dask cluster (nest_experiments.runs.cluster); the same folder and report."""
    from nest_experiments.runs.cluster import parse_cluster, run_on_cluster

    cluster = req.cluster or ""
    address, _ = parse_cluster(cluster)  # a bad value stops here, before anything starts
    if address == "local" and os.geteuid() != 0:
        raise NestExpError("--cluster local:N runs the emulations on this machine: it needs root (use sudo)")
    outcomes = run_on_cluster(runs, cluster=cluster, results_root=results,
                              runtime=req.runtime or runs[0].experiment.runtime)
    if req.plot:
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


def _run_in_vm(req: RunRequest, runs: list[RunSpec], results: Path) -> int:
    from nest_experiments.net.procs import run_lock

    with run_lock():  # the guest has its own /run: without this a host emulation could start beside the VM
        return _run_in_vm_locked(req, runs, results)


def _run_in_vm_locked(req: RunRequest, runs: list[RunSpec], results: Path) -> int:
    from nest_experiments.runs.sweep_in_vm import run_in_guest

    results.mkdir(parents=True, exist_ok=True)
    experiment = _visible_to_guest(req.experiment.resolve(), results) if req.experiment else None
    argv = [sys.executable, "-m", "nest_experiments", *_guest_args(req, results, experiment)]
    record: dict[str, Any] = {"id": new_sweep_id(), "side": "vm_host", "started": now_iso(), "runs": len(runs)}
    t0 = time.monotonic()
    try:
        code = run_in_guest(argv, runs, results, record=record)
    finally:
        _drop_guest_copy(experiment)
    if req.plot:
        t_plot = time.monotonic()
        _plot(results / runs[0].experiment.name)
        record["plot"] = round(time.monotonic() - t_plot, 3)
    elif not req.in_block:
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


def _guest_args(req: RunRequest, results: Path, experiment: Path | None = None) -> list[str]:
    out = ["run", "--runtime", "host", "--results", str(results), "--no-plot"]
    if experiment is not None:
        out.insert(1, str(experiment))
    if req.reps is not None:
        out += ["--reps", str(req.reps)]
    if req.paper:
        out.append("--paper")
    for item in req.overrides:
        out += ["--set", item]
    for name in req.only:
        out += ["--only", name]
    return out
