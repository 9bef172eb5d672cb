"""CPU load of the machine (or the VM) during a run, per 1 s window.

On 2 cores, a busy-polling tool or the emulator itself can saturate the CPU;
then the emulation, not the network, may have shaped the result. The runner
puts the figures and a warning into the manifest.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

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


def _cpu_split() -> list[int]:
    return cpu_jiffies()[:7]


class CpuMonitor:
    """Machine load per window, and CPU seconds per app (``pids_by_app``: app name -> its live processes).

    A process's CPU time can only be read while it lives, so each one's last
    reading is kept: an app's figure is the sum of its processes' last readings
    minus what each had used before the run's start (a server started in the
    app's prepare step, e.g. a player that imported its modules, counts only
    from t = 0).
    """

    def __init__(self, clock: Callable[[], float], interval_s: float = 1.0,
                 pids_by_app: Callable[[], dict[str, list[int]]] | None = None) -> None:
        self.clock = clock
        self.interval_s = interval_s
        self.pids_by_app = pids_by_app
        self._proc_cpu: dict[tuple[str, int], float] = {}
        self._proc_cpu0: dict[tuple[str, int], float] = {}
        self.samples: list[tuple[float, float]] = []  # (t, busy fraction 0..1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-monitor", daemon=True)

    def start(self) -> None:
        self._read_apps()
        self._proc_cpu0 = dict(self._proc_cpu)
        self._times0 = os.times()
        self._threads0 = thread_cpu_s()
        self._procs0 = all_processes_cpu()
        self._split0 = _cpu_split()
        self._thread.start()

    def _loop(self) -> None:
        busy0, total0 = _read_stat()
        while not self._stop.wait(self.interval_s):
            busy1, total1 = _read_stat()
            if total1 > total0:
                self.samples.append((round(self.clock(), 3), (busy1 - busy0) / (total1 - total0)))
            busy0, total0 = busy1, total1
            self._read_apps()

    def _read_apps(self) -> None:
        if self.pids_by_app is None:
            return
        for app, pids in self.pids_by_app().items():
            for pid in pids:
                cpu = process_cpu_s(pid)
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

    def summary(self) -> dict[str, float | int]:
        loads = [load for _, load in self.samples]
        if not loads:
            return {}
        return {"cpu_mean": round(sum(loads) / len(loads), 3), "cpu_max": round(max(loads), 3),
                "cpu_saturated_windows": sum(1 for x in loads if x >= SATURATED)}

    def warnings(self) -> list[str]:
        n = self.summary().get("cpu_saturated_windows", 0)
        if not n:
            return []
        return [f"CPU saturated (>= {SATURATED:.0%}) in {n} of {len(self.samples)} 1 s windows: "
                "the emulation, not the network, may have shaped the result"]
