"""CPU load during a run, per 1 s window: of the machine (or the VM), and of each process of the run.

On 2 cores, a busy-polling tool or the emulator itself can saturate the CPU;
then the emulation, not the network, may have shaped the result. A window is
saturated by either of two rules:

- *machine*: the machine (the VM, inside it) was >= :data:`SATURATED` busy
  over all its CPUs;
- *process*: one process of the run used >= :data:`SATURATED` of one CPU: a
  single-threaded client pegging one of two CPUs is only ~50 % machine-wide.
  The run's processes are the runner's own and all its descendants (apps,
  servers, players and their fetchers, capture tools, tc); a process's share
  is its utime + stime in the window per wall second, plus what the children
  it reaped in the window used in the window (a child seen at the window's
  start counts there only with what it used after it). Threads count with
  their process. In the VM runtime the host adds a third rule (vm.hostload):
- *qemu_thread*: one thread of qemu on the host (a vCPU, or its I/O loop)
  used >= :data:`SATURATED` of one CPU; counted per thread, not per process.

The runner puts the figures and a warning per rule into the manifest. Machine
rule (as before): ``cpu_mean``, ``cpu_max`` (busy fraction of all CPUs),
``cpu_saturated_windows``. All rules, under ``cpu``::

    "cpu": {
      "windows": 30,                  # 1 s windows measured
      "saturated_windows": 3,         # windows saturated by any rule: 0 = a clean run (what the analysis reads)
      "saturated_by": {"machine": 0, "process": 3},  # windows per rule (+ "qemu_thread" in the VM runtime)
      "saturated_t": [4.0, 5.0, 6.0],  # end times (run clock) of those windows, each covers (t - 1, t]
      "processes": [                  # each process that saturated a window, busiest first
        {"comm": "python3", "pid": 4242, "app": "player", "windows": [4.0, 5.0, 6.0], "peak": 1.0}],
      "process_max": {"comm": "python3", "pid": 4242, "app": "player", "t": 5.0, "share": 1.0},
      "qemu_threads": [...],          # VM runtime: as "processes", per qemu thread on the host ("tid", no "app")
      "qemu_thread_max": {...}        # VM runtime: as "process_max"
    }

``app`` is the app whose process it is or descends from, ``"runner"`` for
the run's own process, null for the others (capture tools, tc, ip).
``process_max`` is the busiest process in any window, saturated or not (null
when no process used any CPU). A host window joins ``saturated_t`` unless it ends within
half a window of a guest one already there.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nest_experiments.rundir import SATURATED


def cpu_jiffies(path: str = "/proc/stat") -> list[int]:
    """The machine's CPU time so far, all CPUs: user, nice, system, idle, iowait, irq, softirq, steal."""
    return [int(x) for x in Path(path).read_text().splitlines()[0].split()[1:9]]


def _read_stat() -> tuple[int, int]:
    fields = cpu_jiffies()
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


CLK_TCK = os.sysconf("SC_CLK_TCK")


def read_stat_fields(path: str) -> tuple[str, list[str]] | None:
    """(command name, fields from the state on) of a ``/proc/.../stat`` file, or None once it is gone."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    return text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()  # field 3 is [0]


def stat_cpu_s(fields: list[str], *, children: bool = False) -> float:
    """utime + stime (+ cutime + cstime) in seconds."""
    return sum(int(x) for x in fields[11:15 if children else 13]) / CLK_TCK


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process and its reaped children (``/proc/PID/stat``)."""
    stat = read_stat_fields(f"/proc/{pid}/stat")
    return None if stat is None else stat_cpu_s(stat[1], children=True)


def all_processes_cpu() -> dict[int, tuple[str, float]]:
    """pid -> (command name, CPU seconds) of every process (kernel threads included) now."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (stat := read_stat_fields(f"/proc/{entry.name}/stat")) is not None:
            out[int(entry.name)] = (stat[0], stat_cpu_s(stat[1]))
    return out


def thread_cpu_s() -> dict[str, float]:
    """This process's live threads: Python thread name -> CPU seconds so far."""
    out: dict[str, float] = {}
    for thread in threading.enumerate():
        stat = read_stat_fields(f"/proc/self/task/{thread.native_id}/stat")
        if stat is not None:
            out[thread.name] = out.get(thread.name, 0.0) + stat_cpu_s(stat[1])
    return out


# --------------------------------------------------------------------------- per-process windows

ProcKey = tuple[int, int]  # (pid or tid, start time in clock ticks): a reused pid is another process
PROCESS_FIELDS = ("t", "pid", "comm", "app", "share")  # cpu_procs.csv (CpuMonitor.process_rows)
IDLE = 0.05  # shares below this (of one CPU) are not kept per window, but for the window's busiest process


@dataclass(frozen=True)
class ProcReading:
    """One process (or thread) at one instant, from its ``stat``."""

    comm: str
    ppid: int
    cpu_s: float  # utime + stime
    reaped_s: float = 0.0  # cutime + cstime: what the children it reaped used


def parse_reading(tid: int, data: bytes, *, thread: bool = False) -> tuple[ProcKey, ProcReading] | None:
    """:func:`proc_reading` of a ``stat`` file's bytes; None for a torn (empty, cut) one."""
    try:
        end = data.rindex(b")")
        comm = data[data.index(b"(") + 1:end].decode(errors="replace")
        f = data[end + 2:].split()
        cpu_s = (int(f[11]) + int(f[12])) / CLK_TCK
        reaped = 0.0 if thread else (int(f[13]) + int(f[14])) / CLK_TCK
        return (tid, int(f[19])), ProcReading(comm=comm, ppid=int(f[1]), cpu_s=cpu_s, reaped_s=reaped)
    except (ValueError, IndexError):
        return None


def proc_reading(tid: int, path: str, *, thread: bool = False) -> tuple[ProcKey, ProcReading] | None:
    """Process (or ``thread``) ``tid``'s reading from its ``stat`` file at ``path``; None once it is gone.
    A thread's reaped children are its process's: not its own."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    return parse_reading(tid, data, thread=thread)


# --------------------------------------------------------------------------- per-process windows (pure)

def window_shares(prev: Mapping[ProcKey, ProcReading], cur: Mapping[ProcKey, ProcReading],
                  span_s: float) -> dict[ProcKey, float]:
    """Share of one CPU each process of ``cur`` used since ``prev``, ``span_s`` wall seconds before.

    A process not in ``prev`` started in between: all its time counts. A
    process's reaped children count with it only for what they used in the
    window: a child in ``prev`` that is gone now takes its reading there off
    the growth of its parent's ``reaped_s``.
    """
    return _shares(prev, cur, span_s, {})[0]


def _shares(prev: Mapping[ProcKey, ProcReading], cur: Mapping[ProcKey, ProcReading], span_s: float,
            owed: Mapping[int, float]) -> tuple[dict[ProcKey, float], dict[int, float]]:
    """:func:`window_shares`, and what each parent still owes: a child gone since ``prev`` whose reaping its
    parent's ``reaped_s`` does not show yet (the parent's stat was read just before the child was reaped, so
    the growth lands in the next window). ``owed`` is the last window's; a debt is carried one window only
    (a parent that ignores SIGCHLD never shows its children's time at all)."""
    gone = _gone_by_parent(prev, cur, owed)
    out, left = {}, {}
    for key, c in cur.items():
        p = prev.get(key, ProcReading(comm=c.comm, ppid=c.ppid, cpu_s=0.0))
        fresh = gone.get(key[0], 0.0)
        reaped = c.reaped_s - p.reaped_s - fresh - owed.get(key[0], 0.0)
        if reaped < 0 and fresh > 0:
            left[key[0]] = min(-reaped, fresh)
        out[key] = (max(0.0, c.cpu_s - p.cpu_s) + max(0.0, reaped)) / span_s
    return out, left


def _gone_by_parent(prev: Mapping[ProcKey, ProcReading], cur: Mapping[ProcKey, ProcReading],
                    owed: Mapping[int, float]) -> dict[int, float]:
    """ppid -> what its children gone since ``prev`` had used up to ``prev``. A gone child that had gone
    children of its own (Chromium's renderers, reaped by the browser process, itself reaped by our driver in
    the same window) hands their readings and its own debts up: its parent's reaped time grows by all of them."""
    gone = {key: p for key, p in prev.items() if key not in cur}
    gone_pids = {key[0] for key in gone}
    children: dict[int, list[ProcKey]] = {}
    for key, p in gone.items():
        children.setdefault(p.ppid, []).append(key)

    def total(key: ProcKey, depth: int = 0) -> float:
        p = gone[key]
        below = sum(total(c, depth + 1) for c in children.get(key[0], ())) if depth < 64 else 0.0
        return p.cpu_s + p.reaped_s + owed.get(key[0], 0.0) + below

    out: dict[int, float] = {}
    for key, p in gone.items():
        if p.ppid not in gone_pids:
            out[p.ppid] = out.get(p.ppid, 0.0) + total(key)
    return out


class ShareCounter:
    """:func:`window_shares` over successive readings of one process tree, with the parents' debts carried
    from one window to the next (see :func:`_shares`)."""

    def __init__(self, first: Mapping[ProcKey, ProcReading]) -> None:
        self.prev = dict(first)
        self.owed: dict[int, float] = {}

    def window(self, cur: Mapping[ProcKey, ProcReading], span_s: float) -> dict[ProcKey, float]:
        shares, self.owed = _shares(self.prev, cur, span_s, self.owed)
        self.prev = dict(cur)
        return shares


@dataclass(frozen=True)
class ProcWindow:
    """One 1 s window: its end (run clock) and the share of one CPU of each process that used >= IDLE (and of
    the busiest one in any case)."""

    t: float
    shares: Mapping[ProcKey, float]


@dataclass(frozen=True)
class ProcName:
    comm: str
    app: str | None = None  # the app it belongs to, "runner" for the run's own process


def proc_window(t: float, shares: Mapping[ProcKey, float]) -> ProcWindow:
    top = max(shares, key=lambda k: shares[k], default=None)
    return ProcWindow(t=t, shares={k: round(s, 3) for k, s in shares.items() if s >= IDLE or (k == top and s > 0)})


def _named(key: ProcKey, names: Mapping[ProcKey, ProcName], *, id_field: str) -> dict[str, Any]:
    name = names.get(key, ProcName(comm="?"))
    out: dict[str, Any] = {"comm": name.comm, id_field: key[0]}
    if id_field == "pid":
        out["app"] = name.app
    return out


def hot_processes(windows: Sequence[ProcWindow], names: Mapping[ProcKey, ProcName], *,
                  id_field: str = "pid") -> list[dict[str, Any]]:
    """Each process that used >= SATURATED of one CPU in some window: its name, the windows, its peak share;
    busiest first."""
    hot: dict[ProcKey, list[tuple[float, float]]] = {}
    for w in windows:
        for key, share in w.shares.items():
            if share >= SATURATED:
                hot.setdefault(key, []).append((w.t, share))
    rows = [_named(key, names, id_field=id_field) | {"windows": [t for t, _ in ts], "peak": max(s for _, s in ts)}
            for key, ts in hot.items()]
    return sorted(rows, key=lambda r: (-len(r["windows"]), -r["peak"], r[id_field]))


def busiest(windows: Sequence[ProcWindow], names: Mapping[ProcKey, ProcName], *,
            id_field: str = "pid") -> dict[str, Any] | None:
    """The busiest process in any window (None if none used >= IDLE of a CPU)."""
    best = max(((s, w.t, key) for w in windows for key, s in w.shares.items()), default=None)
    if best is None:
        return None
    share, t, key = best
    return _named(key, names, id_field=id_field) | {"t": t, "share": share}


def guard_record(machine: Sequence[tuple[float, float]], windows: Sequence[ProcWindow],
                 names: Mapping[ProcKey, ProcName]) -> dict[str, Any]:
    """The manifest's ``cpu`` record (module docstring) from the machine's busy fraction and the processes'
    shares per window (both ending at the same run-clock times)."""
    machine_t = {t for t, load in machine if load >= SATURATED}
    hot = hot_processes(windows, names)
    process_t = {t for row in hot for t in row["windows"]}
    saturated = sorted(machine_t | process_t)
    return {"windows": len(machine), "saturated_windows": len(saturated),
            "saturated_by": {"machine": len(machine_t), "process": len(process_t)},
            "saturated_t": saturated, "processes": hot, "process_max": busiest(windows, names)}


def add_thread_rule(record: Mapping[str, Any], windows: Sequence[ProcWindow],
                    names: Mapping[ProcKey, ProcName], *, interval_s: float = 1.0) -> dict[str, Any]:
    """``record`` (the guest's ``cpu``, or empty) with the host's qemu threads as a third rule: a host window
    that ends within half a window of a saturated guest window is that one, any other is one more."""
    hot = hot_processes(windows, names, id_field="tid")
    thread_t = sorted({t for row in hot for t in row["windows"]})
    saturated = list(record.get("saturated_t", []))
    for t in thread_t:
        if all(abs(t - s) >= interval_s / 2 for s in saturated):
            saturated.append(t)
    saturated.sort()
    return {**record, "windows": record.get("windows", len(windows)), "saturated_windows": len(saturated),
            "saturated_by": {**record.get("saturated_by", {}), "qemu_thread": len(thread_t)},
            "saturated_t": saturated, "qemu_threads": hot,
            "qemu_thread_max": busiest(windows, names, id_field="tid")}


def add_guest_rule(record: Mapping[str, Any], shares: Sequence[tuple[float, float]], *,
                   interval_s: float = 1.0) -> dict[str, Any]:
    """``record`` (the host's ``cpu``) with the router runtime's guest as one more rule: an interval (ending at run
    clock ``t``) in which the guest was >= :data:`SATURATED` busy over its vCPUs forwarded late; it joins the
    saturated windows unless a host window already there ends within half a window of it."""
    guest_t = sorted(t for t, share in shares if share >= SATURATED)
    saturated = list(record.get("saturated_t", []))
    for t in guest_t:
        if all(abs(t - s) >= interval_s / 2 for s in saturated):
            saturated.append(t)
    saturated.sort()
    return {**record, "saturated_windows": len(saturated), "saturated_t": saturated,
            "saturated_by": {**record.get("saturated_by", {}), "guest": len(guest_t)}}


def hot_warning(what: str, hot: Sequence[Mapping[str, Any]], windows: int, *, id_field: str = "pid") -> str:
    """The warning that names the processes (threads) of one rule; it starts as the machine rule's does ("CPU
    saturated"), which readers of the warnings match."""
    n = len({t for row in hot for t in row["windows"]})
    who = "; ".join(f"{row['comm']} ({id_field} {row[id_field]}"
                    + (f", app {row['app']}" if row.get("app") else "")
                    + f", {len(row['windows'])} s saturated, peak {row['peak']:.0%})" for row in hot[:3])
    more = f" and {len(hot) - 3} more" if len(hot) > 3 else ""
    return (f"CPU saturated by {what} (>= {SATURATED:.0%} of one CPU) in {n} of {windows} 1 s windows: {who}{more}: "
            "the emulation, not the network, may have shaped the result")


# --------------------------------------------------------------------------- the run's processes (I/O)


class ProcessTree:
    """Process ``root`` and all its descendants, zombies included (their times are final), read from /proc.

    Only /proc's listing and the ``stat`` of new pids and of the tree are read
    each time: a process outside the tree never enters it (a parent that dies
    hands its children to init), so the pids found outside are remembered
    while they live. A tree member's ``stat`` stays open and is read again
    from its start (``pread``): an open and a close per process per window
    less (under the TCG guest the monitor cost ~6 of the ~80 CPU seconds of
    a default run; bench/phase_split.py prints its thread's share).
    """

    def __init__(self, root: int, proc: str = "/proc") -> None:
        self.root = root
        self.proc = proc
        self._outside: set[int] = set()
        self._fds: dict[int, int] = {}  # pid -> its open stat file (tree members)

    def read(self) -> dict[ProcKey, ProcReading]:
        pids = {int(e.name) for e in os.scandir(self.proc) if e.name.isdigit()}
        self._outside &= pids
        for pid in set(self._fds) - pids:  # gone (reaped)
            os.close(self._fds.pop(pid))
        read = {}
        for pid in sorted(pids - self._outside):  # parents (older, lower pids) mostly before their children
            got = self._reading(pid)
            if got is not None:
                read[pid] = got
        tree = _descendants(self.root, {pid: r.ppid for pid, (_, r) in read.items()})
        self._outside |= set(read) - tree
        for pid in set(self._fds) - tree:
            os.close(self._fds.pop(pid))
        return dict(read[pid] for pid in tree)

    def _reading(self, pid: int) -> tuple[ProcKey, ProcReading] | None:
        fd = self._fds.get(pid)
        try:
            if fd is None:
                fd = self._fds[pid] = os.open(f"{self.proc}/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
            data = os.pread(fd, 4096, 0)
        except OSError:  # gone since the listing (ESRCH on an open stat once it is reaped)
            if (fd := self._fds.pop(pid, None)) is not None:
                os.close(fd)
            return None
        return parse_reading(pid, data)

    def close(self) -> None:
        """Close the open ``stat`` files."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _descendants(root: int, ppid: Mapping[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, parent in ppid.items():
        children.setdefault(parent, []).append(pid)
    out, todo = set(), [root] if root in ppid else []
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo += children.get(pid, [])
    return out


def app_of(pid: int, ppid: Mapping[int, int], app_pids: Mapping[int, str], root: int) -> str | None:
    """The app whose process ``pid`` is or descends from; "runner" for ``root`` itself."""
    if pid == root:
        return "runner"
    for _ in range(64):  # a chain, not a loop: bounded all the same
        if pid in app_pids:
            return app_pids[pid]
        if pid == root or pid not in ppid:
            return None
        pid = ppid[pid]
    return None


def _cpu_split() -> list[int]:
    return cpu_jiffies()[:7]


class CpuMonitor:
    """Machine load per window, and CPU seconds per app (``pids_by_app``: app name -> its live processes).

    A process's CPU time can only be read while it lives, so each one's last
    reading is kept: an app's figure is the sum of its processes' last readings
    minus what each had used before the run's start (a server started in the
    app's prepare step, e.g. a player that imported its modules, counts only
    from t = 0).

    Each window also gets the share of one CPU of each process of the run:
    ``root_pid`` (default: this process, the runner) and its descendants.
    """

    def __init__(self, clock: Callable[[], float], interval_s: float = 1.0,
                 pids_by_app: Callable[[], dict[str, list[int]]] | None = None, root_pid: int | None = None) -> None:
        self.clock = clock
        self.interval_s = interval_s
        self.pids_by_app = pids_by_app
        self._proc_cpu: dict[tuple[str, int], float] = {}
        self._proc_cpu0: dict[tuple[str, int], float] = {}
        self.samples: list[tuple[float, float]] = []  # (t, busy fraction 0..1)
        self.windows: list[ProcWindow] = []  # the same windows: each process's share of one CPU
        self.names: dict[ProcKey, ProcName] = {}
        self._tree = ProcessTree(os.getpid() if root_pid is None else root_pid)
        self._app_pids: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-monitor", daemon=True)

    def start(self) -> None:
        self._read_apps()
        self._proc_cpu0 = dict(self._proc_cpu)
        self._times0 = os.times()
        self._threads0 = thread_cpu_s()
        self._procs0 = all_processes_cpu()
        self._split0 = _cpu_split()
        self._shares, self._procs_prev_t = ShareCounter(self._tree.read()), time.monotonic()
        self._thread.start()

    def _loop(self) -> None:
        busy0, total0 = _read_stat()
        while not self._stop.wait(self.interval_s):
            busy1, total1 = _read_stat()
            t = round(self.clock(), 3)
            now, procs = time.monotonic(), self._tree.read()
            self._read_apps(procs)  # first: a process of an app started in this window gets the app's name
            if total1 > total0:
                self.samples.append((t, (busy1 - busy0) / (total1 - total0)))
                self._read_processes(t, now, procs)
            busy0, total0 = busy1, total1

    def _read_processes(self, t: float, now: float, procs: Mapping[ProcKey, ProcReading]) -> None:
        window = proc_window(t, self._shares.window(procs, now - self._procs_prev_t))
        self.windows.append(window)
        ppid = {pid: r.ppid for (pid, _), r in procs.items()}
        for key in window.shares:
            self.names[key] = ProcName(comm=procs[key].comm, app=app_of(key[0], ppid, self._app_pids, self._tree.root))
        self._procs_prev_t = now

    def _read_apps(self, procs: Mapping[ProcKey, ProcReading] | None = None) -> None:
        """Each app's live processes: their names, and their CPU so far from ``procs`` (the tree's readings of
        this window) where it has them, else from their ``stat``."""
        if self.pids_by_app is None:
            return
        read = {pid: r.cpu_s + r.reaped_s for (pid, _), r in (procs or {}).items()}
        for app, pids in self.pids_by_app().items():
            for pid in pids:
                self._app_pids[pid] = app
                cpu = read[pid] if pid in read else process_cpu_s(pid)
                if cpu is not None:
                    self._proc_cpu[(app, pid)] = cpu

    def read_exited(self, app: str, pid: int) -> None:
        """Read ``app``'s process ``pid`` once more after it exited, before it is reaped (its CPU time is
        final then, and includes every child it reaped: e.g. the player's quic-go fetcher)."""
        cpu = process_cpu_s(pid)
        if cpu is not None:
            self._proc_cpu[(app, pid)] = cpu

    def app_cpu_s(self) -> dict[str, float]:
        """CPU seconds per app over the run (processes read at least once a second)."""
        self._read_apps()
        out: dict[str, float] = {}
        for (app, pid), cpu in self._proc_cpu.items():
            out[app] = round(out.get(app, 0.0) + cpu - self._proc_cpu0.get((app, pid), 0.0), 2)
        return out

    def stop(self) -> None:
        self._threads1 = thread_cpu_s()
        self._read_apps()
        self._procs1 = all_processes_cpu()
        self._split1 = _cpu_split()
        self._times1 = os.times()
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * self.interval_s)
        if not self._thread.is_alive():
            self._tree.close()

    def breakdown(self) -> dict[str, object]:
        """Where the CPU went during the run: user/system/softirq shares and the busiest commands."""
        if not hasattr(self, "_procs1"):
            return {}
        names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq")
        delta = [b - a for a, b in zip(self._split0, self._split1, strict=True)]
        total = sum(delta) or 1
        by_comm: dict[str, float] = {}
        for pid, (comm, cpu) in self._procs1.items():
            before = self._procs0.get(pid)
            spent = cpu - (before[1] if before and before[0] == comm else 0.0)
            by_comm[comm] = by_comm.get(comm, 0.0) + spent
        top = sorted(by_comm.items(), key=lambda kv: -kv[1])[:12]
        t0, t1 = self._times0, self._times1
        runner = (t1.user - t0.user) + (t1.system - t0.system)  # its threads (collectors), not its child processes
        return {"cpu_split": {n: round(d / total, 3) for n, d in zip(names, delta, strict=True)},
                "cpu_top_s": {comm: round(s, 2) for comm, s in top if s > 0},
                "runner_cpu_s": round(runner, 2),
                "runner_threads_cpu_s": {name: round(cpu - self._threads0.get(name, 0.0), 2)
                                         for name, cpu in sorted(self._threads1.items())}}

    def summary(self, *, per_thread: frozenset[int] = frozenset()) -> dict[str, Any]:
        """The machine rule's figures and the ``cpu`` record of all rules (module docstring). ``per_thread``: pids
        left out of the process rule, judged per thread instead (the router runtime's qemu: vm.router)."""
        loads = [load for _, load in self.samples]
        if not loads:
            return {}
        windows = [ProcWindow(w.t, {k: v for k, v in w.shares.items() if k[0] not in per_thread}) for w in self.windows]
        return {"cpu_mean": round(sum(loads) / len(loads), 3), "cpu_max": round(max(loads), 3),
                "cpu_saturated_windows": sum(1 for x in loads if x >= SATURATED),
                "cpu": guard_record(self.samples, windows, self.names)}

    def process_rows(self) -> Iterator[dict[str, Any]]:
        """``cpu_procs.csv``: per window, each process of the run that used >= IDLE of one CPU in it (and the
        window's busiest): what a saturated machine window was spent on."""
        for w in self.windows:
            for key, share in sorted(w.shares.items(), key=lambda kv: -kv[1]):
                name = self.names.get(key, ProcName(comm="?"))
                yield {"t": w.t, "pid": key[0], "comm": name.comm, "app": name.app or "", "share": share}

    def warnings(self, *, per_thread: frozenset[int] = frozenset()) -> list[str]:
        """The manifest's warnings, by the rules of :meth:`summary` with the same ``per_thread`` (the router
        runtime's qemu is judged per thread: a warning must not name what the guard's record does not count)."""
        summary = self.summary(per_thread=per_thread)
        out = []
        if n := summary.get("cpu_saturated_windows", 0):
            out.append(f"CPU saturated (>= {SATURATED:.0%}) in {n} of {len(self.samples)} 1 s windows: "
                       "the emulation, not the network, may have shaped the result")
        if hot := summary.get("cpu", {}).get("processes"):
            out.append(hot_warning("one process of the run", hot, len(self.samples)))
        return out
