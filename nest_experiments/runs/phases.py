"""Where a run's and a sweep's wall time goes (issue 31): laps of one monotonic clock, named by the phase they end.

A run's manifest gets ``phases`` (seconds per phase, in the order they run: ``cleanup``, ``topology``,
``app_prepare``, ``collectors_start``, ``traffic``, ``drain``, ``collection``, ``outputs``, ``app_stop``,
``teardown``, ``match``; a phase the run did not reach is absent) and ``app_start_s`` (seconds each app's
``start`` took: inside ``traffic``, so not a phase of its own). A sweep appends one line per side to
``sweeps.jsonl`` in the experiment's results folder (:data:`SWEEP_LOG`): the runner's (``side = "runner"``:
its warm-up, the runs it executed, the time between them, and, in the VM runtime's guest, how long the
guest had been up and its Python had taken to start when the sweep began) and, in the VM runtime, the
host's (``side = "vm_host"``: preparing media, the boot, the whole VM, matching captures, the host's load,
the plot, the command from start to end), joined by the sweep's ``id``. ``bench/phase_split.py`` prints the
split from these files.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nest_experiments.rundir import SWEEP_LOG as SWEEP_LOG  # the folder contract names it; used here and by tests

SWEEP_ID_ENV = "NEST_EXP_SWEEP_ID"  # the host's sweep id, handed to the VM runtime's guest


class Laps:
    """Seconds between successive :meth:`lap` calls, each named by the phase it ends (a name used twice adds up)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = clock()
        self.seconds: dict[str, float] = {}

    def lap(self, name: str) -> float:
        now = self._clock()
        took = now - self._last
        self._last = now
        self.seconds[name] = self.seconds.get(name, 0.0) + took
        return took

    def restart(self) -> None:
        """Forget the time since the last lap (it belongs to no phase)."""
        self._last = self._clock()

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """The block's time as phase ``name`` (the time before it is dropped)."""
        self.restart()
        try:
            yield
        finally:
            self.lap(name)

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self.seconds.items()}


def new_sweep_id() -> str:
    """The sweep's id: the host's (the VM runtime's guest inherits it), else a new one."""
    return os.environ.get(SWEEP_ID_ENV) or uuid.uuid4().hex[:12]


def append_sweep_record(folder: Path, record: dict[str, Any]) -> None:
    """One line of ``folder/sweeps.jsonl`` (appended whole with one write: a reader never sees half a line)."""
    folder.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, sort_keys=True) + "\n"
    fd = os.open(folder / SWEEP_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_sweep_records(folder: Path) -> list[dict[str, Any]]:
    """Every record of ``folder/sweeps.jsonl`` (none when it does not exist); a torn last line is skipped."""
    path = folder / SWEEP_LOG
    if not path.is_file():
        return []
    out: list[dict[str, Any]] = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def process_age_s() -> float | None:
    """Seconds since this process started, from /proc (its start in clock ticks after boot vs the uptime)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat; the split drops pid and comm
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def uptime_s() -> float | None:
    try:
        return float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
