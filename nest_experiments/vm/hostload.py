"""What the host gave the guest: its CPU steal and qemu's CPU, once a second, for each run's manifest.

Under TCG the guest's clock is the host's, so a guest that gets less CPU
than it needs does not slow down: its timers fire late and its queues drain
late. When the host is itself a virtual machine, its hypervisor may take CPU
time from it (``steal`` in ``/proc/stat``); seen here: 19.5% of the host's
time while the guest ran, and a 10 Mbit/s link in the guest that carried 5.6.
The guest cannot see this, so the host samples it while qemu runs and, after
the sweep, writes each run's share into its manifest (``host_steal``,
``host_qemu_cpus``) with a warning above :data:`STEAL_WARN`. It reads each of
qemu's threads too: one (a vCPU) that used >= 95 % of one CPU in a 1 s window
saturates the window (the ``qemu_thread`` rule of ``collectors.cpu``; the
manifest's ``cpu`` record, with a warning that names the thread).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from nest_experiments.collectors.cpu import (
    ProcKey,
    ProcName,
    ProcReading,
    ProcWindow,
    add_thread_rule,
    cpu_jiffies,
    hot_warning,
    proc_reading,
    proc_window,
    read_stat_fields,
    stat_cpu_s,
    window_shares,
)

STEAL_WARN = 0.05


@dataclass(frozen=True)
class HostSample:
    wall: float  # time.time()
    steal: int  # jiffies, all CPUs
    total: int  # jiffies, all CPUs
    qemu_s: float  # qemu's user + system CPU seconds
    threads: tuple[tuple[ProcKey, ProcReading], ...] = ()  # each of qemu's threads: (tid, start) -> its CPU


def read_threads(pid: int, proc: Path = Path("/proc")) -> tuple[tuple[ProcKey, ProcReading], ...]:
    try:
        tids = sorted(int(e.name) for e in os.scandir(proc / str(pid) / "task") if e.name.isdigit())
    except OSError:
        return ()
    task = proc / str(pid) / "task"
    return tuple(got for tid in tids if (got := proc_reading(tid, str(task / str(tid) / "stat"), thread=True)))


def read_sample(pid: int, proc: Path = Path("/proc")) -> HostSample | None:
    try:
        cpu = cpu_jiffies(str(proc / "stat"))
    except (OSError, ValueError, IndexError):
        return None
    stat = read_stat_fields(str(proc / str(pid) / "stat"))
    if stat is None:
        return None
    return HostSample(wall=time.time(), steal=cpu[7], total=sum(cpu), qemu_s=stat_cpu_s(stat[1]),
                      threads=read_threads(pid, proc))


class HostLoad:
    """Samples the host every ``interval_s`` while process ``pid`` (qemu) runs."""

    def __init__(self, pid: int, interval_s: float = 1.0) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[HostSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="host-load", daemon=True)

    def start(self) -> HostLoad:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while True:
            sample = read_sample(self.pid)
            if sample is not None:
                self.samples.append(sample)
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> list[HostSample]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * self.interval_s)
        return list(self.samples)


def window(samples: list[HostSample], t0: float, t1: float) -> dict[str, float] | None:
    """Steal fraction and qemu's CPUs between wall times ``t0`` and ``t1`` (None with < 2 samples in it)."""
    inside = [s for s in samples if t0 <= s.wall <= t1]
    if len(inside) < 2:
        return None
    a, b = inside[0], inside[-1]
    span = b.wall - a.wall
    if b.total <= a.total or span <= 0:
        return None
    return {"host_steal": round((b.steal - a.steal) / (b.total - a.total), 3),
            "host_qemu_cpus": round((b.qemu_s - a.qemu_s) / span, 2)}


def thread_windows(samples: list[HostSample], t0: float,
                   t1: float) -> tuple[list[ProcWindow], dict[ProcKey, ProcName]]:
    """Each qemu thread's share of one CPU between successive samples in wall times ``t0`` to ``t1``; each
    window ends at its sample's wall time - ``t0`` (the run clock)."""
    inside = [s for s in samples if t0 <= s.wall <= t1]
    windows, names = [], {}
    for a, b in itertools.pairwise(inside):
        if b.wall > a.wall:
            cur = dict(b.threads)
            windows.append(w := proc_window(round(b.wall - t0, 3), window_shares(dict(a.threads), cur, b.wall - a.wall)))
            names.update({key: ProcName(comm=cur[key].comm) for key in w.shares})
    return windows, names


def annotate(manifest: dict[str, Any], samples: list[HostSample]) -> bool:
    """Add the host's figures over the run's traffic (``t0_wall`` to ``traffic_end_t``); False if none apply."""
    try:
        t0 = datetime.fromisoformat(str(manifest["t0_wall"])).timestamp()
        t1 = t0 + float(manifest.get("traffic_end_t", manifest["duration_s"]))
    except (KeyError, TypeError, ValueError):
        return False
    figures = window(samples, t0, t1)
    if figures is None:
        return False
    manifest.update(figures)
    warnings = []
    if figures["host_steal"] >= STEAL_WARN:
        warnings.append(f"the host's hypervisor took {figures['host_steal']:.0%} of its CPU time during "
                        "this run: the guest's timers and queues may have run late")
    windows, names = thread_windows(samples, t0, t1)
    manifest["cpu"] = add_thread_rule(manifest.get("cpu") or {}, windows, names)
    if hot := manifest["cpu"]["qemu_threads"]:
        warnings.append(hot_warning("a thread of qemu on the host", hot, len(windows), id_field="tid"))
    if warnings:
        manifest["warnings"] = [*manifest.get("warnings", []), *warnings]
    return True
