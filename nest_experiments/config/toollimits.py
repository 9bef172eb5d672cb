"""The limits of the tools behind each app kind, checked when an experiment file is loaded.

One table per app kind, key -> :class:`Limit`; :mod:`nest_experiments.config`
checks every numeric key of an app against its table, so a value the tool
would refuse (or silently change) stops the run before any namespace or VM
exists, with one line naming the key, the range and whose limit it is::

    apps.bulk.flows: 100000 is out of range 1..128: iperf3 -P allows at most 128 parallel streams

Where a bound is this project's choice rather than the tool's, ``why`` says so.
Sources: iperf3 3.12 (its parameter errors, tried: ``-P 129``, ``-t 86401``,
``-i 0.05``, ``-p 65536``; ``-t`` is read with ``atoi``), SIPp 3.6 (``man
sipp``: ``-mp``, ``-d`` in ms), httperf 0.9 (``httperf -v``: "maximum number
of open descriptors = 1024", FD_SETSIZE), Linux (``ip mptcp limits set
subflows 9``: "limit greater than maximum (8)"; ``net.mptcp.add_addr_timeout``
is an ``int`` of jiffies).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nest_experiments.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Limit:
    """``low <= value <= high`` (``whole``: and an integer), because ``why``."""

    low: float
    high: float
    why: str
    unit: str = ""
    whole: bool = False

    def check(self, path: str, value: float) -> float:
        if not self.low <= value <= self.high:
            raise ConfigError(path, f"{_num(value)}{self.unit} is out of range {self.range}: {self.why}")
        if self.whole and value != int(value):
            raise ConfigError(path, f"{_num(value)}{self.unit} is not a whole number: {self.why}")
        return value

    @property
    def range(self) -> str:
        return f"{_num(self.low)}..{_num(self.high)}{self.unit}"


def _num(value: float) -> str:
    return f"{value:.10g}"


_PORT = Limit(low=1024, high=65535, why="a port above the privileged ones (1..1023 belong to system services)")

IPERF3: dict[str, Limit] = {
    "flows": Limit(low=1, high=128, why="iperf3 -P allows at most 128 parallel streams"),
    # the app's own duration, or the rest of the run after its start: iperf3 -t
    "duration": Limit(low=1, high=86400, unit=" s", whole=True,
                      why="iperf3 -t takes whole seconds (atoi: 2.5 runs 2 s), at most 86400"),
    "interval": Limit(low=0.1, high=60, unit=" s", why="iperf3 -i allows 0.1..60 s"),
    "port": _PORT,
}

SIPP: dict[str, Limit] = {
    "rate": Limit(low=0.001, high=1000, unit=" calls/s",
                  why="this project's bound (SIPp has none): 1000 calls/s of 2 s is ~160 Mbit/s of RTP each way"),
    "call_length": Limit(low=0.02, high=3600, unit=" s",
                         why="at least one 20 ms RTP packet; SIPp -d, at most this project's 1 h"),
    "port": _PORT,
    "media_port": Limit(low=1024, high=65532, why="SIPp binds media_port..media_port+3 (-mp), all below 65536"),
    "timer_slack": Limit(low=0, high=0.02, unit=" s", why="this project's bound: SIPp's timers may fire this late"),
}

HTTPERF: dict[str, Limit] = {
    "rate": Limit(low=0.001, high=10000, unit="/s", why="httperf --rate (0 would mean one connection after another)"),
    # rate x timeout: the connections open at once when the server stops answering
    "open_connections": Limit(low=0, high=1000,
                              why="httperf waits with select(), which holds at most 1024 descriptors (FD_SETSIZE), "
                                  "one per open connection: lower rate x timeout"),
    "size": Limit(low=1, high=1024**3, unit=" bytes", why="this project's bound: the served file is at most 1 GB"),
    "cpu_limit": Limit(low=1, high=100, unit="%", why="a cgroup CPU cap of 1%..100% of one CPU"),
    "port": _PORT,
}

DASH: dict[str, Limit] = {
    "mptcp_subflows": Limit(low=1, high=8, whole=True,
                            why="the kernel's MPTCP path manager allows at most 8 (ip mptcp limits set subflows)"),
    "mptcp_add_addr_timeout": Limit(low=1, high=2147483, unit=" s", whole=True,
                                    why="net.mptcp.add_addr_timeout is an int of jiffies: whole seconds up to "
                                        "INT_MAX / HZ (2147483 at HZ = 1000)"),
}


def integer(limit: Limit) -> Callable[[str, object], int]:
    """A TOML integer within ``limit`` (a config converter)."""

    def conv(path: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"expected an integer in {limit.range}, got {value!r}")
        limit.check(path, value)
        return value

    return conv


def number(limit: Limit) -> Callable[[str, object], float]:
    """A TOML number within ``limit`` (a config converter)."""

    def conv(path: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(path, f"expected a number in {limit.range}, got {value!r}")
        return limit.check(path, float(value))

    return conv
