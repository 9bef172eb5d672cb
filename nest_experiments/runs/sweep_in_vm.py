"""A sweep's command run inside one VM (the VM runtime): what the host does before (media, byte code) and after
(the captures matched, the host's load into each manifest), around :func:`nest_experiments.runs.runtime.enter_vm`.
Used by ``run`` (launch) for a whole sweep and by a cluster worker (cluster_task) for one run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nest_experiments.collectors.capture import match_sweep_captures
from nest_experiments.config import APP_KINDS
from nest_experiments.config.sweep import RunSpec
from nest_experiments.runs import runtime
from nest_experiments.runs.phases import SWEEP_ID_ENV, Laps, new_sweep_id
from nest_experiments.runs.runner import queue_grace_s

if TYPE_CHECKING:
    from nest_experiments.vm.hostload import HostSample

VM_TIMEOUT_MARGIN_S = 600.0


def run_in_guest(argv: list[str], runs: list[RunSpec], results: Path, *, record: dict[str, Any] | None = None) -> int:
    """Run ``argv`` (a ``nest_experiments`` command that runs ``runs`` into ``results``) in one VM, with
    ``results`` writable; then, on the host, match the runs' captures and add the host's load to their
    manifests. Returns the guest command's exit code. ``record``: filled with the host's phases (runs.phases:
    ``prepare``, ``setup`` (the VM image and the accelerator check, before qemu starts), ``boot``, ``vm`` (the
    whole guest, setup and boot included), ``match``, ``annotate``), the guest told
    the same sweep id."""
    laps = Laps()
    record = record if record is not None else {}
    record.setdefault("id", new_sweep_id())
    before_guest_runs(runs)
    laps.lap("prepare")
    budget = sum((r.experiment.duration_s + 60) * 3 + queue_grace_s(r.experiment) for r in runs) + VM_TIMEOUT_MARGIN_S
    print(f"running {len(runs)} run(s) in a VM (this kernel lacks: "
          f"{runtime.missing_summary(runs) or 'nothing; --runtime vm'})", file=sys.stderr, flush=True)
    result = runtime.enter_vm(argv, rw_dirs=[results], timeout_s=budget, extra_env={SWEEP_ID_ENV: record["id"]})
    laps.lap("vm")
    record.update(laps.as_dict(), setup=result.setup_s, boot=result.boot_s, poweroff=result.poweroff_s, accel=result.accel)
    record.update(after_guest_runs(results / runs[0].experiment.name, None, list(result.host_samples)))
    return result.exit_code


def before_guest_runs(runs: list[RunSpec]) -> None:
    """On the host, before the guest runs ``runs``: their media, and the project's byte code."""
    _prepare_on_host(runs)
    _compile_for_guest()


def after_guest_runs(folder: Path, runs: list[RunSpec] | None, samples: list[HostSample]) -> dict[str, float]:
    """On the host, after the guest ran ``runs`` (None: every run in ``folder``): their captures matched and the
    host's load written into their manifests. Returns the two phases' seconds (``match``, ``annotate``)."""
    laps = Laps()
    match_sweep_captures(folder)  # pcaps of the guest's runs, matched here on the host (the matched are skipped)
    laps.lap("match")
    _host_load_into_manifests(folder, samples, None if runs is None else {r.name for r in runs})
    laps.lap("annotate")
    return laps.as_dict()


def _host_load_into_manifests(folder: Path, samples: list[HostSample], names: set[str] | None = None) -> None:
    """Each run of this VM's sweep (those named in ``names``, default all) gets the host's steal and qemu's CPU
    during its traffic (vm.hostload)."""
    from nest_experiments.rundir import read_manifest, write_json
    from nest_experiments.vm.hostload import STEAL_WARN, annotate

    for path in sorted(folder.glob("*/manifest.json")):
        if names is not None and path.parent.name not in names:
            continue
        manifest = read_manifest(path.parent)
        if manifest is not None and annotate(manifest, samples):
            write_json(path, manifest)
            if manifest["host_steal"] >= STEAL_WARN:
                print(f"{path.parent.name}: the host's hypervisor took {manifest['host_steal']:.0%} of its CPU "
                      "during the run (manifest: host_steal)", file=sys.stderr, flush=True)


def _prepare_on_host(runs: list[RunSpec]) -> None:
    """What the guest cannot do, because it sees the project read-only (e.g. generate DASH media)."""
    for r in runs:
        for app in r.experiment.apps:
            APP_KINDS[app.kind].launcher_class().prepare_host(app)


def _compile_for_guest() -> None:
    """Byte-compile the project on the host: the guest sees it read-only (and runs with
    PYTHONDONTWRITEBYTECODE), so every Python process it starts (the runner, each run's DASH server and
    player) would otherwise compile the modules it imports again, at TCG's ~8x slower speed."""
    import compileall

    import nest_experiments

    compileall.compile_dir(Path(nest_experiments.__file__).parent, quiet=1)  # a read-only install: nothing to do
