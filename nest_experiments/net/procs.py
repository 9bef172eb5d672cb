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
import functools
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from nest_experiments.errors import MissingToolError, NestExpError, NetworkSetupError

STATE_DIR = Path("/run/nest_experiments")
CLONE_NEWNET = 0x40000000


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
    cgroups: list[str] = field(default_factory=list)  # cgroup folders we created (CPU caps)
    nft_tables: list[list[str]] = field(default_factory=list)  # [namespace, family, table] of our firewalls

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

    def temp_dir(self, label: str) -> Path:
        """A new private folder in the system's temp folder, listed so that teardown (or a later run) removes it.

        Off the results folder on purpose: under the VM runtime that is a 9p
        share, where one open/read/close costs ~6 ms of guest CPU against
        ~0.4 ms on the guest's own tmpfs.
        """
        path = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-{label}-"))
        self.paths.append(str(path))
        self.save()
        return path

    def _remove_host_changes(self) -> None:
        existing = set(list_root_ifnames())
        for ifname in self.root_ifnames:
            if ifname in existing:
                subprocess.run(["ip", "link", "delete", ifname], capture_output=True, check=False)
        for key, value in self.host_sysctls.items():
            with contextlib.suppress(OSError):
                Path(key).write_text(value)

    def owner_alive(self) -> bool:
        return self.start_time is not None and _proc_start_time(self.pid) == self.start_time

    def remove(self) -> None:
        """Remove everything listed (processes, namespaces, interfaces, cgroups, paths), then the file."""
        kill_namespace_processes(*self.namespaces)
        for cgroup in self.cgroups:
            if Path(cgroup).name.startswith(f"{self.prefix}-"):  # never anything but ours
                remove_cgroup(Path(cgroup))
        delete_nft_tables(self.nft_tables)
        delete_namespaces([ns for ns in self.namespaces if Path("/run/netns", ns).exists()])
        if self.root_ifnames or self.host_sysctls:
            with build_lock():  # not while another run builds: the names in the root namespace may be its own
                self._remove_host_changes()
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


def remove_cgroup(path: Path, timeout_s: float = 2.0) -> bool:
    """Kill what is left in a cgroup of ours (only our tools are ever moved there), then rmdir it."""
    with contextlib.suppress(OSError, ValueError):
        for pid in (int(x) for x in (path / "cgroup.procs").read_text().split()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:  # EBUSY until the killed processes are gone
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def list_root_ifnames() -> list[str]:
    return [p.name for p in Path("/sys/class/net").iterdir()]


def namespace_pids(*namespaces: str) -> list[int]:
    """Processes (other than us) whose network namespace is one of ``namespaces`` (as ``ip netns pids``).

    Read from /proc, not with a process per namespace: a process costs
    ~0.3 s under the TCG VM.
    """
    wanted = set()
    for ns in namespaces:
        with contextlib.suppress(OSError):
            st = os.stat(f"/run/netns/{ns}")
            wanted.add((st.st_dev, st.st_ino))
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{entry.name}/ns/net")
                if (st.st_dev, st.st_ino) in wanted:
                    pids.append(int(entry.name))
    return pids


def delete_nft_tables(tables: Sequence[Sequence[str]]) -> None:
    """``nft delete table FAMILY NAME`` in each listed namespace that still exists (a missing one is no error)."""
    for ns, family, name in tables:
        if ns in {p.name for p in Path("/run/netns").glob("*")}:
            subprocess.run(ns_exec(ns, ["nft", "delete", "table", family, name]), capture_output=True, check=False)


def delete_namespaces(namespaces: Sequence[str]) -> None:
    """``ip netns delete`` each (one process for all; a missing one is no error)."""
    if namespaces:
        subprocess.run(["ip", "-force", "-batch", "-"], input="".join(f"netns delete {ns}\n" for ns in namespaces),
                       capture_output=True, text=True, check=False)


def kill_namespace_processes(*namespaces: str, grace_s: float = 2.0) -> None:
    """SIGTERM every process in the namespaces, SIGKILL what is left after ``grace_s``."""
    pids = namespace_pids(*namespaces)
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
def run_lock(*, shared: bool = False) -> Iterator[None]:
    """The machine's emulation lock, taken for a whole sweep or one cluster task.

    Exclusive (the one-machine sweep, the default): one emulation at a time, fidelity first. Shared: the runs
    that cluster workers on this machine run (``run --cluster local:N``, or several ``dask worker`` processes
    on one machine); they run side by side, each with its own prefix (namespaces, state file, temp folders,
    cgroups) and share the CPU, which their manifests record (``parallel_runs``). Either kind stops at once
    when the other holds the lock.
    """
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with (STATE_DIR / "lock").open("a+") as fh:
        try:
            fcntl.flock(fh, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip()
            what = (f"a one-machine nest_experiments sweep is active (pid {holder or '?'})" if shared else
                    f"another nest_experiments run is active (pid {holder or '?'})" if holder else
                    "cluster workers on this machine are running emulations")
            raise NestExpError(f"{what}; wait for it or stop it") from None
        fh.seek(0)
        fh.truncate()  # what a kill -9'd holder left; shared holders leave the file empty
        if not shared:
            fh.write(str(os.getpid()))
            fh.flush()
        try:
            yield
        finally:
            if not shared:
                fh.seek(0)
                fh.truncate()
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Serialises what runs on one machine share while a topology is built: NeST creates each veth pair in the
    root namespace under the names of the topology (``r1``, ``h1``) before it moves the ends into the run's
    namespaces, and a run may add its congestion control to the host's allowed list (restored at teardown).
    Blocks until the other run's build (about a second on the host) is done."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with (STATE_DIR / "build.lock").open("a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def live_runs(*, other_than: str = "") -> list[str]:
    """Prefixes of the runs on this machine whose process is alive (``other_than``: leave that one out)."""
    return sorted(s.prefix for s in load_states() if s.prefix != other_than and s.owner_alive())


def _setns(libc: ctypes.CDLL, ns: str) -> None:
    try:
        target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    except OSError as exc:
        raise NetworkSetupError(f"no namespace {ns}") from exc
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise NetworkSetupError(f"cannot enter namespace {ns}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(target)


def enter_netns(ns: str) -> None:
    """Move this thread into namespace ``ns`` for good (threads it starts later follow it): what ``ip netns
    exec`` does for the network, without its process, mount namespace and ``/sys`` (net.warm)."""
    _setns(ctypes.CDLL("libc.so.6", use_errno=True), ns)


@contextlib.contextmanager
def in_netns(ns: str) -> Iterator[None]:
    """Run the body with this thread inside namespace ``ns``; always come back.

    For work that needs no process: netlink sockets (they stay in the
    namespace they were made in) and ``/proc/sys/net`` (resolved in the
    opener's namespace). Under the TCG VM a process costs a large fraction of a
    second; a setns costs microseconds.
    """
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _setns(libc, ns)
        try:
            yield
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:  # never leave this thread in the wrong namespace
                raise NetworkSetupError("cannot return to the original network namespace")
    finally:
        os.close(own)


def sysctl_in(ns: str, key: str, value: str) -> str:
    """Write ``key`` (dotted, under /proc/sys) in namespace ``ns``; return what it reads back."""
    path = Path("/proc/sys", *key.split("."))
    with in_netns(ns):
        try:
            path.write_text(value)
            return path.read_text().strip()
        except OSError as exc:
            raise NetworkSetupError(f"sysctl {key}={value} in {ns}: {exc.strerror}") from None


PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6", use_errno=True)


def set_timer_slack(timer_slack_ns: int | None) -> None:
    """This thread's timer slack (``prctl(PR_SET_TIMERSLACK)``), if given: inherited across exec and by the
    threads the program starts."""
    if timer_slack_ns:
        _libc().prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(timer_slack_ns), 0, 0, 0)


@contextlib.contextmanager
def timer_slack(timer_slack_ns: int | None) -> Iterator[None]:
    """This thread's timer slack set to ``timer_slack_ns`` (if given) inside the block and restored after it: a
    process started in the block inherits it and keeps it across exec."""
    if not timer_slack_ns:
        yield
        return
    before = _libc().prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)
    set_timer_slack(timer_slack_ns)
    try:
        yield
    finally:
        _libc().prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(before), 0, 0, 0)


def dies_with_parent(argv: Sequence[str]) -> list[str]:
    """``argv`` behind util-linux's ``setpriv --pdeathsig KILL``: the program gets SIGKILL when the thread that
    started it ends (the runner's, even by ``kill -9``), as a ``prctl(PR_SET_PDEATHSIG)`` in a ``preexec_fn``
    did, but with no Python in the child between fork and exec, so that ``subprocess`` vforks instead of
    forking: a fork copies the runner's page tables and then every page its Python touches (a start cost
    3.3 ms of CPU here against 0.55 ms vforked; the TCG guest's ~8x on top, ~10 starts in a default run's
    first second). A runner killed in the instant between the fork and setpriv's prctl leaves the program
    to the next run's cleanup (``clean``)."""
    return [_setpriv(), "--pdeathsig", "KILL", "--", *argv]


@functools.cache
def _setpriv() -> str:
    return require_tool("setpriv", "util-linux")


def wait_exited(proc: subprocess.Popen[bytes], *, timeout_s: float, poll_s: float = 0.02) -> bool:
    """Wait up to ``timeout_s`` for ``proc`` to exit, without reaping it (``WNOWAIT``): True once it has."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped elsewhere
            return True
        if info is not None and info.si_pid == proc.pid:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def require_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MissingToolError(f"{name} not found: install it (Debian/Ubuntu: apt-get install {package})")
    return path


def ns_exec(ns: str, argv: Sequence[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def popen_in_ns(ns: str, argv: Sequence[str], *, stdout: IO[bytes] | int | None, stderr: IO[bytes] | int | None = None,
                cwd: Path | None = None, timer_slack_ns: int | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` inside ``ns``; it dies with us even after a ``kill -9`` (:func:`dies_with_parent`).

    ``timer_slack_ns``: the process's timer slack (``prctl(PR_SET_TIMERSLACK)``):
    its timed sleeps may end up to that much late, so the kernel can merge the
    wakeups of a program that polls on a short timeout (:func:`timer_slack`).
    """
    with timer_slack(timer_slack_ns):
        return subprocess.Popen(ns_exec(ns, dies_with_parent(argv)), stdout=stdout, stderr=stderr,
                                stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True)


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


def stop_all(procs: Sequence[subprocess.Popen[bytes]], *, sig: int = signal.SIGTERM,
             timeout_s: float = 5.0) -> list[int]:
    """:func:`stop` for several processes side by side: all signalled first, then each waited for (SIGKILL
    for one that does not go within ``timeout_s`` of the signal); their exit codes, in order."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return [proc.returncode for proc in procs]


class BatchError(NetworkSetupError):
    """A batch command failed: ``index`` is the failing command's position."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


def side_by_side(jobs: Sequence[Callable[[], object]]) -> None:
    """Run ``jobs`` at once, each in a thread, and wait for all; the first job (in order) that raised raises.

    For work that is a process each (``ip``/``tc`` batches of different
    namespaces, which depend on nothing of each other): under the TCG VM a
    process costs ~0.2-0.3 s of a vCPU to start, and the guest has two. The
    jobs run in threads of their own: not in the namespace the caller's
    thread may have entered (:func:`in_netns`)."""
    if len(jobs) <= 1:
        for job in jobs:
            job()
        return
    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="side-by-side") as pool:
        futures = [pool.submit(job) for job in jobs]
    for future in futures:
        future.result()


def run_batch(prefix: list[str], commands: list[list[str]], *, what: str, force: bool = False) -> None:
    """``prefix -batch -`` with one command per line; with ``force`` failures are ignored.

    Batch lines are split on white space, so no argument may contain any
    (ours are addresses, device names, numbers with units).
    """
    if not commands:
        return
    for args in commands:
        if any(not a or any(c.isspace() for c in a) for a in args):
            raise NetworkSetupError(f"{what}: cannot batch an empty argument or one with spaces: {args!r}")
    text = "".join(" ".join(args) + "\n" for args in commands)
    proc = subprocess.run([*prefix, *(["-force"] if force else []), "-batch", "-"], input=text,
                          capture_output=True, text=True, check=False)
    if proc.returncode == 0 or force:
        return
    err = (proc.stderr or proc.stdout).strip()
    failed = re.search(r"Command failed -:(\d+)", err)
    index = int(failed.group(1)) - 1 if failed and 0 < int(failed.group(1)) <= len(commands) else len(commands) - 1
    detail = next((line for line in err.splitlines() if not line.startswith("Command failed")), err)
    raise BatchError(f"{what} failed: {' '.join(prefix + commands[index])}: {detail}", index)
