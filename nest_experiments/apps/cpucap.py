"""A CPU cap for a busy-polling client (httperf): one cgroup per app with a CPU quota.

cgroup v2 (``/sys/fs/cgroup`` is cgroup2 with the ``cpu`` controller: a
systemd host, the VM guest, whose init mounts it) gets ``cpu.max``; a
cgroup v1 ``cpu`` hierarchy (``/sys/fs/cgroup/cpu``, e.g. this container
host) gets ``cpu.cfs_quota_us``/``cpu.cfs_period_us``. The folder is
``<run prefix>-<app>``, listed in the run's state file before it is made, so
that a later run removes what a dead one left (``procs.RunState.remove``).

The period is short (10 ms): a throttled client waits at most period - quota
(8 ms at 20%) before it runs again, which bounds what the cap adds to the
response times it measures. Without a usable cpu controller the client runs
uncapped and the app warns.
"""

from __future__ import annotations

import math
from pathlib import Path

from nest_experiments.net.procs import RunState, remove_cgroup

CGROUP_ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 10_000
MIN_QUOTA_US = 1_000  # the kernel refuses quotas below 1 ms


def quota_us(fraction: float) -> tuple[int, int]:
    """(quota, period) in microseconds for ``fraction`` of one CPU (0 < fraction <= 1)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"CPU fraction must be in (0, 1], got {fraction!r}")
    period = max(PERIOD_US, math.ceil(MIN_QUOTA_US / fraction))
    return max(MIN_QUOTA_US, round(fraction * period)), period


def find_cpu_controller(root: Path = CGROUP_ROOT) -> tuple[int, Path] | None:
    """(cgroup version, parent folder) of a usable cpu controller, or None."""
    controllers = root / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return 2, root
    if (root / "cpu" / "cpu.cfs_quota_us").exists():
        return 1, root / "cpu"
    return None


def parse_cpu_stat(text: str) -> dict[str, int]:
    """``cpu.stat`` (v1 or v2) -> {key: value}."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


class CpuCap:
    """A cgroup of ours holding one client, capped at ``fraction`` of one CPU."""

    def __init__(self, name: str, fraction: float, *, state: RunState, root: Path = CGROUP_ROOT) -> None:
        self.name = f"{state.prefix}-{name}"
        self.fraction = fraction
        self.state = state
        self.root = root
        self.path: Path | None = None
        self.version = 0
        self.stat: dict[str, int] = {}

    def create(self) -> str | None:
        """Make the cgroup; returns a warning (and caps nothing) where that is not possible."""
        found = find_cpu_controller(self.root)
        if found is None:
            return f"no cgroup cpu controller under {self.root}: {self.name} runs without a CPU cap"
        self.version, parent = found
        path = parent / self.name
        quota, period = quota_us(self.fraction)
        self.state.cgroups.append(str(path))
        self.state.save()  # before creating it: a later run can remove it
        try:
            if self.version == 2:
                control = parent / "cgroup.subtree_control"
                if "cpu" not in control.read_text().split():
                    control.write_text("+cpu")  # the VM guest's fresh cgroup2 root
            path.mkdir()
            self.path = path
            if self.version == 2:
                (path / "cpu.max").write_text(f"{quota} {period}")
            else:
                (path / "cpu.cfs_period_us").write_text(str(period))
                (path / "cpu.cfs_quota_us").write_text(str(quota))
        except OSError as exc:
            self.remove()
            return f"cannot cap the CPU of {self.name} with cgroup v{self.version} ({exc.strerror}): running uncapped"
        return None

    def add(self, pid: int) -> str | None:
        if self.path is None:
            return None
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
        except OSError as exc:
            return f"cannot move pid {pid} into {self.path} ({exc.strerror}): running uncapped"
        return None

    def throttled_ratio(self) -> float | str:
        """Share of the CPU periods in which the client hit its quota ('' when unknown)."""
        periods, throttled = self.stat.get("nr_periods", 0), self.stat.get("nr_throttled", 0)
        return round(throttled / periods, 4) if periods else ""

    def remove(self) -> None:
        """Read the final ``cpu.stat``, then remove the cgroup (idempotent)."""
        if self.path is not None:
            try:
                self.stat = parse_cpu_stat((self.path / "cpu.stat").read_text())
            except OSError:
                pass
            remove_cgroup(self.path)
            self.path = None
        for listed in [c for c in self.state.cgroups if Path(c).name == self.name]:
            if not Path(listed).exists():
                self.state.cgroups.remove(listed)
                self.state.save()
