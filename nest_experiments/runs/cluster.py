"""``run --cluster``: a sweep's runs as tasks on a Dask distributed cluster (the submitter's side).

``--cluster tcp://HOST:8786`` uses a running scheduler and its workers; ``--cluster local:N`` starts a scheduler
and N worker processes on this machine (parallel emulations then share its CPU: each manifest records the
cluster and the runs beside it, ``cluster`` and ``parallel_runs``). Workers offer ``emulator=1``
(``dask worker ... --resources emulator=1``) and every task asks for it, so a worker runs one emulation at a
time; each worker chooses the host or the VM runtime by its own kernel (:mod:`nest_experiments.runs.cluster_task`).

Runs already completed with the same configuration are not sent. Each finished task's run folder comes back as
a tar and is unpacked next to its final place, then renamed into ``results/<experiment>/<run>/`` (a run folder
is there whole or not at all). A run whose worker was lost while it ran is sent once more; lost again, it is
recorded as failed with the reason. A task lost before it started (its worker died while it waited) is sent
again without counting. Run with a scheduler whose ``allowed-failures`` is 0 (``local:N`` sets it), so that the
project, not the scheduler, decides how often a run is re-sent.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import re
import shutil
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from nest_experiments.config.sweep import RunSpec
from nest_experiments.errors import NestExpError
from nest_experiments.rundir import is_completed, read_manifest, write_failed_run
from nest_experiments.runs.cluster_task import EVENT_TOPIC, base_manifest, execute, payload_for
from nest_experiments.runs.outcome import RunOutcome, config_text, sweep_summary
from nest_experiments.runs.progress import Progress

RESOURCE = "emulator"
LOST_TWICE = 2  # a run whose worker is lost this many times while it runs is recorded failed
MAX_SENDS = 6  # sends of one run, lost before starting included
CONNECT_TIMEOUT_S = 30.0
POLL_S = 0.5
LOCAL = re.compile(r"local:(\d+)")


@dataclass(frozen=True, kw_only=True)
class ClusterResult:
    name: str
    status: str  # completed | failed | interrupted | skipped
    reason: str
    seconds: float
    where: str


def parse_cluster(value: str) -> tuple[str, int]:
    """``local:N`` -> ("local", N); a scheduler address (``tcp://host:8786``, ``tls://...``) -> (address, 0)."""
    m = LOCAL.fullmatch(value)
    if m:
        n = int(m.group(1))
        if n < 1:
            raise NestExpError("--cluster local:N: N is the number of worker processes, at least 1")
        return "local", n
    if value.startswith("local"):
        raise NestExpError(f"--cluster {value}: expected local:N (N worker processes on this machine), e.g. local:2")
    if "://" not in value:
        raise NestExpError(f"--cluster {value}: expected a scheduler address such as tcp://HOST:8786, or local:N")
    return value, 0


@contextlib.contextmanager
def connect(value: str) -> Iterator[Any]:
    """A Dask client for ``--cluster``; ``local:N`` starts (and at the end stops) a local cluster."""
    import dask
    from distributed import Client, LocalCluster

    address, n = parse_cluster(value)
    if address != "local":
        with Client(address, timeout=CONNECT_TIMEOUT_S) as client:
            yield client
        return
    with tempfile.TemporaryDirectory(prefix="nx-dask-") as scratch, \
            dask.config.set({"distributed.scheduler.allowed-failures": 0, "temporary-directory": scratch}), \
            LocalCluster(n_workers=n, threads_per_worker=1, processes=True, resources={RESOURCE: 1},
                         dashboard_address=None, silence_logs=40, local_directory=scratch) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(n, timeout=CONNECT_TIMEOUT_S)
        yield client


def emulator_slots(client: Any, *, wait_s: float = CONNECT_TIMEOUT_S) -> int:
    """How many emulations the cluster's workers run at once (their ``emulator`` resources); waits up to
    ``wait_s`` for a first such worker (workers started with the submitter are still registering)."""
    deadline = time.monotonic() + wait_s
    while True:
        workers = client.scheduler_info(n_workers=-1)["workers"].values()
        slots = int(sum(w.get("resources", {}).get(RESOURCE, 0) for w in workers))
        if slots or time.monotonic() >= deadline:
            return slots
        time.sleep(POLL_S)


@dataclass(kw_only=True)
class _Tracker:
    """Where each run is: how often it was sent, whether (and when) its current task started, where it runs,
    how often its worker was lost while it ran. ``token`` makes this sweep's task keys its own on a shared
    scheduler (another sweep may have runs of the same names)."""

    specs: dict[str, RunSpec]
    payloads: dict[str, dict[str, Any]]
    sends: dict[str, int] = field(default_factory=dict)
    started: dict[str, bool] = field(default_factory=dict)
    started_at: dict[str, float] = field(default_factory=dict)
    losses: dict[str, int] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)
    lost_reasons: dict[str, list[str]] = field(default_factory=dict)
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:8])


def run_on_cluster(runs: list[RunSpec], *, cluster: str, results_root: Path, runtime: str = "auto",
                   out: TextIO = sys.stderr) -> list[ClusterResult]:
    """Every run not yet completed, as tasks on the cluster; each folder installed as its task ends."""

    if not runs:
        return []
    folder = results_root / runs[0].experiment.name
    folder.mkdir(parents=True, exist_ok=True)
    clean_incoming(folder)
    texts = {s.name: config_text(s) for s in runs}
    progress = Progress(total=len(runs), out=out)
    results: list[ClusterResult] = []
    todo = []
    for spec in runs:
        if is_completed(folder / spec.name, texts[spec.name]):
            progress.skip(spec.name)
            results.append(ClusterResult(name=spec.name, status="skipped", reason="", seconds=0.0, where="-"))
        else:
            todo.append(spec)
    t_start = time.monotonic()
    if todo:
        results += _submit_all(todo, texts, cluster=cluster, runtime=runtime, folder=folder, progress=progress)

    print(sweep_summary([RunOutcome(r.name, r.status, r.reason, r.seconds, folder / r.name) for r in results],
                        time.monotonic() - t_start, folder), file=out, flush=True)
    return results


def _submit_all(todo: list[RunSpec], texts: dict[str, str], *, cluster: str, runtime: str, folder: Path,
                progress: Progress) -> list[ClusterResult]:
    with connect(cluster) as client:
        slots = emulator_slots(client)
        if slots < 1:
            raise NestExpError(f"--cluster {cluster}: no worker offers the '{RESOURCE}' resource after "
                               f"{CONNECT_TIMEOUT_S:g} s; start the workers "
                               f"with: dask worker {cluster} --nthreads 1 --resources {RESOURCE}=1")
        progress.slots = slots
        _, n = parse_cluster(cluster)
        info = {"scheduler": cluster if n == 0 else client.scheduler.address, "emulator_slots": slots,
                **({"local_workers": n, "note": f"{n} worker processes on one machine: parallel emulations share its "
                                                "CPU"} if n else {})}
        tracker = _Tracker(specs={s.name: s for s in todo},
                           payloads={s.name: payload_for(s, config_text=texts[s.name], runtime=runtime, cluster=info)
                                     for s in todo})
        events: queue.Queue[dict[str, Any]] = queue.Queue()
        client.subscribe_topic(EVENT_TOPIC, lambda event: events.put(event[1]))
        pending = {_send(client, tracker, s.name): s.name for s in todo}
        results: list[ClusterResult] = []
        while pending:
            done = [f for f in pending if f.done()]
            for future in done:
                if future.status != "finished":
                    _drain(events, tracker, progress)  # whether the lost run had started
                name = pending.pop(future)
                result = _finished(future, name, tracker, folder, progress)
                if result is None:
                    pending[_send(client, tracker, name)] = name
                else:
                    results.append(result)
            _drain(events, tracker, progress)  # after the ends seen: a worker's next run starts after its last ended
            if not done:
                time.sleep(POLL_S)
        client.unsubscribe_topic(EVENT_TOPIC)
        return results


def _send(client: Any, tracker: _Tracker, name: str) -> Any:
    tracker.sends[name] = tracker.sends.get(name, 0) + 1
    tracker.started[name] = False
    payload = {**tracker.payloads[name], "attempt": tracker.sends[name]}
    key = f"nx-{payload['experiment']}-{name}-{tracker.token}-{tracker.sends[name]}"
    return client.submit(execute, payload, key=key, pure=False,
                         resources={RESOURCE: 1}, retries=0)


def _drain(events: queue.Queue[dict[str, Any]], tracker: _Tracker, progress: Progress) -> None:
    while True:
        try:
            msg = events.get_nowait()
        except queue.Empty:
            return
        name = msg.get("run")
        if msg.get("event") != "start" or name not in tracker.specs or msg.get("attempt") != tracker.sends.get(name):
            continue
        tracker.started[name] = True
        tracker.started_at[name] = time.monotonic()
        tracker.where[name] = str(msg.get("where", "?"))
        progress.start(name, duration_s=tracker.specs[name].experiment.duration_s, where=tracker.where[name])


def _finished(future: Any, name: str, tracker: _Tracker, folder: Path,
              progress: Progress) -> ClusterResult | None:
    """The run's folder installed and its line printed; ``None``: send it again."""
    where = tracker.where.get(name, "?")
    if future.status == "finished":
        value = future.result()
        where = value.get("worker", where)
        try:
            if not value.get("tar"):
                raise NestExpError(f"the run's process on {where} exited with {value.get('exit')}: "
                                   f"{' | '.join(value.get('stderr') or [])}")
            install(folder, name, value["tar"])
        except (NestExpError, tarfile.TarError, OSError) as err:
            record_failed(folder, tracker.payloads[name], str(err))
        return _result(folder, name, where, float(value.get("seconds", 0.0)), progress)
    exc = future.exception() if future.status == "error" else None
    lost_worker = _is_lost_worker(exc)
    ran_s = time.monotonic() - tracker.started_at.get(name, time.monotonic())
    if tracker.started.get(name) and lost_worker:
        tracker.losses[name] = tracker.losses.get(name, 0) + 1
        tracker.lost_reasons.setdefault(name, []).append(f"{where}, {ran_s:.1f} s into the run")
    lost = tracker.losses.get(name, 0)
    if lost_worker and lost < LOST_TWICE and tracker.sends[name] < MAX_SENDS:
        if tracker.started.get(name):
            progress.say(f"{name}: the worker running it was lost ({where}, {ran_s:.1f} s into the run); "
                         "sending it again")
        return None
    why = f"{type(exc).__name__}: {exc}" if exc is not None else f"the task was {future.status}"
    reason = (f"the worker running it was lost twice ({'; '.join(tracker.lost_reasons.get(name, []))}): "
              f"{type(exc).__name__}" if lost >= LOST_TWICE else f"the task failed on the cluster: {why}")
    record_failed(folder, tracker.payloads[name], reason)
    return _result(folder, name, where, ran_s if tracker.started.get(name) else 0.0, progress)


def _is_lost_worker(exc: BaseException | None) -> bool:
    from distributed.scheduler import KilledWorker

    return isinstance(exc, KilledWorker) or (exc is not None and "CommClosed" in type(exc).__name__)


def _result(folder: Path, name: str, where: str, seconds: float, progress: Progress) -> ClusterResult:
    m = read_manifest(folder / name) or {}
    status, reason = str(m.get("status", "failed")), str(m.get("reason", ""))
    progress.end(name, status=status, seconds=seconds, where=where, reason=reason)
    return ClusterResult(name=name, status=status, reason=reason, seconds=seconds, where=where)


# ---------------------------------------------------------------- run folders on the submitter


def install(folder: Path, name: str, data: bytes) -> Path:
    """Unpack a task's run folder (a tar of ``name/``) next to its place, then rename it into ``folder/name``."""
    with _incoming(folder, name) as tmp:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            bad = [m.name for m in tar.getmembers() if not _inside(m.name, name)]
            if bad:
                raise NestExpError(f"{name}: the worker's run folder holds files outside it: {', '.join(bad[:3])}")
            tar.extractall(tmp, filter="data")
        if read_manifest(tmp / name) is None:
            raise NestExpError(f"{name}: the worker's run folder has no readable manifest.json")
        _swap_in(tmp, tmp / name, folder / name)
    return folder / name


def _inside(member: str, name: str) -> bool:
    path = PurePosixPath(member)
    return not path.is_absolute() and ".." not in path.parts and path.parts[:1] == (name,)


def record_failed(folder: Path, payload: dict[str, Any], reason: str) -> Path:
    """A run folder that says the run failed and why (its worker lost twice, the task refused), put in place whole."""
    name = payload["name"]
    with _incoming(folder, name) as tmp:
        write_failed_run(tmp / name, config_text=payload["config_text"],
                         manifest={**base_manifest(payload), "reason": reason, "finished": base_manifest(payload)["started"]})
        _swap_in(tmp, tmp / name, folder / name)
    return folder / name


@contextlib.contextmanager
def _incoming(folder: Path, name: str) -> Iterator[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.incoming-", dir=folder))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _swap_in(tmp: Path, new: Path, final: Path) -> None:
    """``new`` becomes ``final``; an older ``final`` (a failed run's) moves into ``tmp`` and goes with it."""
    if final.exists():
        os.rename(final, tmp / ".replaced")
    os.rename(new, final)


def clean_incoming(folder: Path) -> None:
    """What a submitter killed while unpacking left (``.<run>.incoming-*``)."""
    for path in folder.glob(".*.incoming-*"):
        shutil.rmtree(path, ignore_errors=True)
