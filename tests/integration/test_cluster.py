"""Sweeps on a Dask cluster: real scheduler and worker processes, real namespaces on this machine.

A 4-run sweep of a short host experiment (HTB + pfifo, 3 s runs) on ``--cluster local:2`` gives the folder a
one-machine sweep gives (run names, files, configs), runs side by side without colliding, and resumes without
sending anything; on a scheduler and two ``dask worker`` processes started as docs/cluster.md says, a worker killed
with SIGKILL during a run gets that run re-sent, and killed again, recorded failed with the reason.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nest_experiments.net import procs
from nest_experiments.rundir import STATUSES
from nest_experiments.runs.phases import SWEEP_LOG
from tests.conftest import ROOT, child_processes, cli, our_namespaces

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

SHORT = str(ROOT / "tests" / "data" / "cluster" / "short_sweep.toml")
EXPERIMENT = "cluster_short"
RUNS = {"qdisc-pfifo-20_r1", "qdisc-pfifo-20_r2", "qdisc-pfifo-100_r1", "qdisc-pfifo-100_r2"}
DASK = str(Path(sys.executable).parent / "dask")
TASKS = ROOT / ".cache" / "tasks"


def _files(run_dir: Path) -> set[str]:
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file() and p.parent.name != "raw"}


def _manifests(folder: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    return {p.parent.name: json.loads(p.read_text()) for p in folder.glob("*/manifest.json")}


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("local")
    proc = cli("run", SHORT, "--results", str(results), "--no-plot", timeout=120)
    assert proc.returncode == 0, proc.stderr
    return results / EXPERIMENT


@pytest.fixture(scope="module")
def cluster_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    results = tmp_path_factory.mktemp("cluster")
    proc = cli("run", SHORT, "--results", str(results), "--no-plot", "--cluster", "local:2", timeout=120)
    assert proc.returncode == 0, proc.stderr
    return results / EXPERIMENT, proc.stderr


def test_cluster_sweep_gives_the_local_sweeps_folder(local_sweep: Path, cluster_sweep: tuple[Path, str]) -> None:
    folder, _ = cluster_sweep
    # nothing else, but the one-machine sweep's log of where its time went (runs.phases)
    assert {p.name for p in folder.iterdir()} == {p.name for p in local_sweep.iterdir()} - {SWEEP_LOG} == RUNS
    assert (local_sweep / SWEEP_LOG).is_file()
    for name in RUNS:
        local, remote = local_sweep / name, folder / name
        assert (remote / "config.toml").read_text() == (local / "config.toml").read_text()
        assert _files(remote) == _files(local)
        m = json.loads((remote / "manifest.json").read_text())
        assert m["status"] == "completed" and m["runtime"] == "host" and m["run"] == name
        assert m["cluster"]["local_workers"] == 2 and "share its CPU" in m["cluster"]["note"]
        assert not list(remote.rglob(".*.tmp"))
    assert not list(folder.glob(".*")), "an unpacking folder left behind"
    assert our_namespaces() == [] and child_processes() == []
    assert not TASKS.exists() or not list(TASKS.iterdir()), "a task's private folder left behind"


def test_two_runs_side_by_side_on_one_machine(cluster_sweep: tuple[Path, str]) -> None:
    folder, stderr = cluster_sweep
    manifests = _manifests(folder)
    prefixes = {m["prefix"] for m in manifests.values()}
    assert len(prefixes) == 4  # each run its own namespaces, state file and temp folders
    overlapped = [n for n, m in manifests.items() if m["parallel_runs"]]
    assert overlapped, "no run saw another one on the machine: the cluster ran them one at a time"
    for name in overlapped:
        assert set(manifests[name]["parallel_runs"]) <= prefixes - {manifests[name]["prefix"]}
    # progress: a line as each run starts and ends, with the worker, and the count with the time left
    starts = [line for line in stderr.splitlines() if ": running (3 s) on worker " in line]
    ends = [line for line in stderr.splitlines() if ": completed in " in line and " on worker " in line]
    assert len(starts) == 4 and len(ends) == 4, stderr
    assert "[4/4 done]" in ends[-1] and "min left" in ends[0]


def test_cluster_resume_sends_nothing(cluster_sweep: tuple[Path, str]) -> None:
    folder, _ = cluster_sweep
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    proc = cli("run", SHORT, "--results", str(folder.parent), "--no-plot", "--cluster", "local:1", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("completed earlier, skipped") == 4 and "running" not in proc.stderr
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before


# ---------------------------------------------------------------- a worker lost mid-run


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def scheduler_and_workers(tmp_path: Path) -> Iterator[str]:
    """``dask scheduler`` and two ``dask worker ... --resources emulator=1`` processes, as docs/cluster.md says."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0",
           "DASK_TEMPORARY_DIRECTORY": str(tmp_path / "dask")}
    procs = [subprocess.Popen([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)]
    procs += [subprocess.Popen([DASK, "worker", address, "--nthreads", "1", "--resources", "emulator=1",
                                "--name", f"w{i}", "--no-dashboard"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True) for i in (1, 2)]
    try:
        yield address
    finally:
        for p in reversed(procs):
            os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _task_processes() -> dict[int, tuple[str, int]]:
    """pid -> (run name, parent pid) of every ``nest_experiments task - --run NAME`` process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"task" in argv and b"--run" in argv:
            out[int(entry.name)] = (argv[argv.index(b"--run") + 1].decode(), ppid)
    return out


def _kill_worker_running(sweep: subprocess.Popen[str], run: str | None, *, after_s: float, dead: tuple[int, ...] = (),
                         timeout_s: float = 60) -> tuple[str, int, int]:
    """Wait until a task process runs ``run`` (any run: None) for ``after_s``, SIGKILL the worker that started it;
    returns the run, the worker's pid and the task's. ``dead``: task processes of killed workers (still tearing
    down, their parent gone) to leave alone."""
    deadline = time.monotonic() + timeout_s
    seen: dict[int, float] = {}
    while time.monotonic() < deadline and sweep.poll() is None:
        for pid, (name, ppid) in _task_processes().items():
            if (run is None or name == run) and pid not in dead and ppid != 1:
                first = seen.setdefault(pid, time.monotonic())
                if time.monotonic() - first >= after_s:
                    os.kill(ppid, signal.SIGKILL)
                    return name, ppid, pid
        time.sleep(0.1)
    raise AssertionError(f"no task process for {run or 'any run'} (sweep exit {sweep.poll()}): "
                         f"{sweep.stderr.read() if sweep.poll() is not None and sweep.stderr else ''}")


def test_worker_killed_mid_run_is_resent_once_then_failed(scheduler_and_workers: str, tmp_path: Path) -> None:
    sweep = subprocess.Popen([sys.executable, "-m", "nest_experiments", "run", SHORT, "--results", str(tmp_path),
                              "--no-plot", "--cluster", scheduler_and_workers], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        victim, first, task = _kill_worker_running(sweep, None, after_s=1.5)  # in its traffic (setup takes ~1 s)
        _, second, _ = _kill_worker_running(sweep, victim, after_s=1.5, dead=(task,))  # the re-sent run, again
        _, stderr = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
    print(stderr)  # shown when the test fails (or with -s)
    assert first != second
    assert sweep.returncode == 1, stderr  # one run failed
    manifests = _manifests(tmp_path / EXPERIMENT)
    assert set(manifests) == RUNS, stderr
    assert all(m["status"] in STATUSES for m in manifests.values())
    failed = manifests.pop(victim)
    assert failed["status"] == "failed" and "lost twice" in failed["reason"], failed
    assert (tmp_path / EXPERIMENT / victim / "config.toml").is_file()
    assert {m["status"] for m in manifests.values()} == {"completed"}, stderr
    assert f"{victim}: the worker running it was lost" in stderr
    assert not list((tmp_path / EXPERIMENT).glob(".*"))
    deadline = time.monotonic() + 30  # the killed workers' runs tear themselves down (SIGTERM from the kernel)
    while (our_namespaces() or _task_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    states = {p.name: p.read_text() for p in procs.STATE_DIR.glob("*.json")}
    assert our_namespaces() == [] and _task_processes() == {} and child_processes() == [], states
    assert not TASKS.exists() or not list(TASKS.iterdir())
