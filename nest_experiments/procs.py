"""Processes in namespaces, the per-run state file, and cleanup of dead runs.

Every run (and every test topology) gets a prefix (``nx1a2b3c``); its
namespaces are named ``<prefix>-<node>``. Before anything is created, the
run writes ``/run/nest_experiments/<prefix>.json`` with its pid, the pid's
start time, and the names it is about to create. A later run reads every
state file whose owner is dead and removes exactly what it lists (processes
inside its namespaces, the namespaces, stray interfaces, temp files) and
nothing else. ``/run`` is a tmpfs: after a reboot both the namespaces and
the state files are gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from nest_experiments.errors import MissingToolError, NestExpError, NetworkSetupError

STATE_DIR = Path("/run/nest_experiments")
PR_SET_PDEATHSIG = 1


def new_prefix() -> str:
    return "nx" + secrets.token_hex(3)


def _proc_start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


@dataclass
class RunState:
    """What one run owns; persisted so that a later run can clean up after a dead one."""

    prefix: str
    pid: int = field(default_factory=os.getpid)
    start_time: int | None = None
    namespaces: list[str] = field(default_factory=list)
    root_ifnames: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    host_sysctls: dict[str, str] = field(default_factory=dict)  # /proc/sys path -> value to restore

    def __post_init__(self) -> None:
        if self.start_time is None:
            self.start_time = _proc_start_time(self.pid)

    @property
    def file(self) -> Path:
        return STATE_DIR / f"{self.prefix}.json"

    def save(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(self.file)

    def owner_alive(self) -> bool:
        return self.start_time is not None and _proc_start_time(self.pid) == self.start_time

    def remove(self) -> None:
        """Remove everything listed (processes, namespaces, interfaces, paths), then the file."""
        for ns in self.namespaces:
            kill_namespace_processes(ns)
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True, check=False)
        existing = set(list_root_ifnames())
        for ifname in self.root_ifnames:
            if ifname in existing:
                subprocess.run(["ip", "link", "delete", ifname], capture_output=True, check=False)
        for key, value in self.host_sysctls.items():
            with contextlib.suppress(OSError):
                Path(key).write_text(value)
        for path in self.paths:
            p = Path(path)
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        self.file.unlink(missing_ok=True)


def load_states() -> list[RunState]:
    states = []
    for file in sorted(STATE_DIR.glob("*.json")):
        try:
            states.append(RunState(**json.loads(file.read_text())))
        except (OSError, ValueError, TypeError):
            file.unlink(missing_ok=True)  # a half-written state file of ours
    return states


def clean_dead_runs() -> list[str]:
    """Remove what runs whose process is gone left behind; returns their prefixes."""
    cleaned = []
    for state in load_states():
        if not state.owner_alive():
            state.remove()
            cleaned.append(state.prefix)
    return cleaned


def list_namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def list_root_ifnames() -> list[str]:
    return [p.name for p in Path("/sys/class/net").iterdir()]


def namespace_pids(ns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=False).stdout
    return [int(x) for x in out.split() if x.isdigit() and int(x) != os.getpid()]


def kill_namespace_processes(ns: str, grace_s: float = 2.0) -> None:
    """SIGTERM every process in ``ns``, SIGKILL what is left after ``grace_s``."""
    pids = namespace_pids(ns)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            time.sleep(0.05)
            pids = [p for p in pids if _alive(p)]
        if not pids:
            return


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    return Path(f"/proc/{pid}").exists() and "State:\tZ" not in _status(pid)


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""


@contextlib.contextmanager
def run_lock() -> Iterator[None]:
    """One run at a time per machine: runs share interface names in the root namespace."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with (STATE_DIR / "lock").open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            raise NestExpError(f"another nest_experiments run is active (pid {fh.read().strip() or '?'}); "
                               "wait for it or stop it") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def require_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MissingToolError(f"{name} not found: install it (Debian/Ubuntu: apt-get install {package})")
    return path


def ns_exec(ns: str, argv: Sequence[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def popen_in_ns(ns: str, argv: Sequence[str], *, stdout: IO[bytes] | int | None, stderr: IO[bytes] | int | None = None,
                cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` inside ``ns``; it dies with us even after a ``kill -9``."""
    return subprocess.Popen(ns_exec(ns, argv), stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, cwd=cwd,
                            preexec_fn=_die_with_parent, start_new_session=True)


def check_run(argv: Sequence[str], *, what: str) -> str:
    """Run a setup command; a non-zero exit stops the run with its stderr."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise NetworkSetupError(f"{what} failed: {' '.join(argv)}: {err[-1] if err else f'exit {proc.returncode}'}")
    return proc.stdout


def stop(proc: subprocess.Popen[bytes], *, sig: int = signal.SIGTERM, timeout_s: float = 5.0) -> int:
    """Signal a process and wait; SIGKILL if it does not go."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
