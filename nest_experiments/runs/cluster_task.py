"""One run of a sweep as a task on a cluster worker (the worker's side of :mod:`nest_experiments.runs.cluster`).

The submitter sends a *payload*: the run's resolved configuration (``raw``), its name, repetition, point and
position, the ``config.toml`` text it expects (what resume compares), the runtime asked for, and where it runs
(``cluster``). On the worker, :func:`execute` (the Dask task) starts ``python -m nest_experiments task -`` in a
process of its own and returns that run's folder as a gzipped tar; the submitter unpacks it into its results
folder (:func:`nest_experiments.runs.cluster.install`).

The run's own process (:func:`task_command`): works in a private folder under ``.cache/tasks/`` (removed when it
ends; one whose process is gone is removed by the next task), chooses the runtime by the worker's kernel (the
host when it has what the run needs, else one VM for this run), runs it under the machine's shared emulation
lock (:func:`nest_experiments.net.procs.run_lock`), and writes the tar to its stdout (whatever the run prints goes to
stderr). It always produces a run folder: when the run cannot start (a trace file missing on this worker, a
one-machine sweep holding the lock), a folder that says ``failed`` with the reason. It gets SIGTERM when the
worker process that started it dies, and then tears its run down and removes its folder.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any

from nest_experiments import resources
from nest_experiments.config.sweep import RunSpec
from nest_experiments.errors import Interrupted, NestExpError
from nest_experiments.rundir import STATUSES, read_manifest, write_failed_run
from nest_experiments.runs import runtime
from nest_experiments.runs.outcome import config_text, now_iso
from nest_experiments.runs.preflight import preflight

TASKS_DIR = resources.cache_dir("tasks")  # not under /tmp: a VM's guest must see it
EVENT_TOPIC = "nest_experiments"
PR_SET_PDEATHSIG = 1
STDERR_TAIL = 5


def payload_for(spec: RunSpec, *, config_text: str, runtime: str, cluster: dict[str, Any]) -> dict[str, Any]:
    """What a worker needs to run ``spec`` (plain data: it crosses the network)."""
    return {"experiment": spec.experiment.name, "name": spec.name, "repetition": spec.repetition,
            "position": spec.position, "point": [list(p) for p in spec.point], "raw": spec.experiment.raw,
            "config_text": config_text, "runtime": runtime, "cluster": cluster}


def spec_from_payload(payload: dict[str, Any]) -> RunSpec:
    """The run again, validated on this machine; its ``config.toml`` must be the submitter's, byte for byte."""
    from nest_experiments.config import parse_experiment

    spec = RunSpec(name=payload["name"], repetition=int(payload["repetition"]), position=int(payload["position"]),
                   point=tuple((str(k), v) for k, v in payload["point"]), experiment=parse_experiment(payload["raw"]))
    if config_text(spec) != payload["config_text"]:
        raise NestExpError("this worker writes a different config.toml for the run than the submitter: install the "
                           "same nest_experiments version on both")
    return spec


# ---------------------------------------------------------------- the Dask task


def execute(payload: dict[str, Any]) -> dict[str, Any]:
    """Run one run in a process of its own; its folder comes back as ``tar`` (gzipped bytes)."""
    where = worker_name()
    _event({"event": "start", "run": payload["name"], "attempt": payload.get("attempt", 1), "where": where})
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "nest_experiments", "task", "-", "--run", payload["name"]],
                          input=json.dumps(payload).encode(), capture_output=True, check=False,
                          preexec_fn=_term_with_parent)
    tail = proc.stderr.decode(errors="replace").strip().splitlines()[-STDERR_TAIL:]
    return {"name": payload["name"], "worker": where, "seconds": time.monotonic() - t0,
            "tar": proc.stdout if proc.returncode == 0 else b"", "exit": proc.returncode, "stderr": tail}


def worker_name() -> str:
    host = platform.node()
    try:
        from distributed import get_worker

        name = str(get_worker().name)
    except (ImportError, ValueError):
        return host
    return f"worker {name} ({host})" if host not in name else f"worker {name}"


def _event(msg: dict[str, Any]) -> None:
    try:
        from distributed import get_worker

        get_worker().log_event(EVENT_TOPIC, msg)
    except (ImportError, ValueError):  # not on a Dask worker (tests call execute directly)
        pass


def _term_with_parent() -> None:
    """In the run's process: SIGTERM when the worker that started it dies (it then tears its run down)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


# ---------------------------------------------------------------- the run's process


def task_command(spec: str, *, out: Path | None = None) -> int:
    """``python -m nest_experiments task SPEC|- [--out DIR]`` (internal: started by :func:`execute`): the run's
    payload from the file ``spec`` (``-``: stdin); ``out``: run into this folder (in the VM's guest)."""
    payload = json.loads(sys.stdin.read() if spec == "-" else Path(spec).read_text())
    if out is not None:  # in the VM's guest: run into DIR, the host side packs it
        return run_into(payload, out)
    tar_fd = os.dup(1)
    os.dup2(2, 1)  # stdout carries the run folder: anything the run prints goes to stderr
    from nest_experiments.runs.runner import signals_as_exceptions
    from nest_experiments.vm.qemu import clean_stale

    TASKS_DIR.mkdir(parents=True, exist_ok=True)
    clean_stale(TASKS_DIR)  # the folders of tasks whose process was killed
    tmp = TASKS_DIR / f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()  # nothing may raise between here and the try
    try:
        with signals_as_exceptions():  # SIGTERM (the worker died): the run is torn down, its folder removed
            os.chdir(tmp)  # NeST writes coap_error.log into the working directory
            run_here(payload, tmp)
            data = pack(tmp / payload["experiment"], payload["name"])
        with os.fdopen(tar_fd, "wb") as fh:
            fh.write(data)
    finally:
        os.chdir("/")
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def run_here(payload: dict[str, Any], folder: Path) -> None:
    """The run into ``folder/<experiment>/<run>``, on this kernel or in a VM; always leaves a finished manifest."""
    from nest_experiments.runs.sweep_in_vm import run_in_guest

    run_dir = folder / payload["experiment"] / payload["name"]
    try:
        spec = spec_from_payload(payload)
        preflight([spec])
        if runtime.choose(payload["runtime"] or spec.experiment.runtime, [spec]) == "vm":
            spec_file = folder / "spec.json"
            spec_file.write_text(json.dumps(payload))
            argv = [sys.executable, "-m", "nest_experiments", "task", str(spec_file), "--out", str(folder)]
            code = run_in_guest(argv, [spec], folder)
            if code != 0 and read_manifest(run_dir) is None:
                raise NestExpError(f"the run's command in the VM exited with {code}")
        else:
            run_into(payload, folder)
    except Interrupted:
        raise
    except NestExpError as exc:
        _record_failure(payload, run_dir, str(exc))
    manifest = read_manifest(run_dir)
    if manifest is None or manifest.get("status") not in STATUSES:
        _record_failure(payload, run_dir, "the run ended without a finished manifest")


def run_into(payload: dict[str, Any], folder: Path) -> int:
    """The run in this process (the host runtime, or inside the VM), beside other workers' runs on this machine."""
    from nest_experiments.net.procs import run_lock
    from nest_experiments.runs.runner import Run, signals_as_exceptions, warm_up

    spec = spec_from_payload(payload)
    warmup = runtime.warmup_s()
    with run_lock(shared=True), signals_as_exceptions():
        if warmup > 0:  # each run boots a VM of its own: warm it as the VM runtime warms its first run
            warm_up(spec, warmup)
        Run(spec, folder / spec.experiment.name / spec.name, extra={"cluster": payload["cluster"]}).execute()
    return 0


def _record_failure(payload: dict[str, Any], run_dir: Path, reason: str) -> None:
    old = read_manifest(run_dir) or {}
    write_failed_run(run_dir, config_text=payload["config_text"], manifest={
        **base_manifest(payload), **old, "reason": reason, "finished": old.get("finished") or now_iso()})


def base_manifest(payload: dict[str, Any]) -> dict[str, Any]:
    """The manifest fields a run has before it starts (for a folder that records a run that could not run)."""
    return {"experiment": payload["experiment"], "run": payload["name"], "repetition": payload["repetition"],
            "position": payload["position"], "point": dict((k, v) for k, v in payload["point"]),
            "cluster": payload["cluster"], "started": now_iso()}


def pack(parent: Path, name: str) -> bytes:
    """``parent/name`` as a gzipped tar whose members all lie under ``name/``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(parent / name, arcname=name)
    return buf.getvalue()
