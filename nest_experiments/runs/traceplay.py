"""Trace-driven links during a run: one thread applies every traced egress's HTB rate changes on time.

The schedule of each egress comes from its config
(:meth:`~nest_experiments.config.EgressConfig.trace_steps`: the trace at
``trace_step``, looped to cover the run and its finishing grace). The HTB
class was built at the trace's first rate; from the run's t = 0 this thread
sleeps until the next change is due and applies it over netlink
(:class:`~nest_experiments.net.rtnl.HtbRates`: no process per change), waiting
for the kernel's acknowledgement. A thread that wakes late applies, per
egress, only the newest due rate (the older ones are counted as skipped).

``rates.csv`` gets one row per applied change: ``t`` (run clock when the
kernel acknowledged it), ``t_scheduled`` (the trace's time), ``link``,
``direction`` (forward = a -> b), ``node``, ``rate_bps``; the first rows (t =
0) are the rates the classes were built with. ``t - t_scheduled`` is how late
a change was. When the run ends, each class is read back from the kernel and
must hold the last rate applied.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nest_experiments.config import Experiment
from nest_experiments.errors import NestExpError, RunError
from nest_experiments.net.netlink import HtbClass
from nest_experiments.net.network import Network
from nest_experiments.net.routed import GuestRates
from nest_experiments.net.rtnl import HtbRates
from nest_experiments.net.tcplan import Egress
from nest_experiments.rundir import RATES, CsvSink

FIELDS = ("t", "t_scheduled", "link", "direction", "node", "rate_bps")
LATE_WARNING_S = 0.05


class RateSetter(Protocol):
    """What the player needs of :class:`~nest_experiments.net.rtnl.HtbRates` (a fake in unit tests)."""

    def set(self, egress: Egress, rate_bps: int) -> None: ...

    def read(self, egress: Egress) -> HtbClass: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Change:
    t: float
    egress: Egress
    direction: str
    rate_bps: int


def changes_for(exp: Experiment, egresses: list[Egress], until_s: float) -> list[Change]:
    """Every rate change of every traced egress over [0, until_s), in time order (t = 0 first)."""
    out = []
    for egress in egresses:
        link = exp.link(egress.link)
        direction = "forward" if egress.node == link.a else "reverse"
        cfg = link.forward if direction == "forward" else link.reverse
        out += [Change(t, egress, direction, rate) for t, rate in cfg.trace_steps(until_s)]
    return sorted(out, key=lambda c: c.t)


class TracePlayer:
    """Applies ``changes`` on the run's ``clock``; rows to ``path``. open() before t0, start() at t0, stop().

    ``rates`` opens the rate setter for the traced egresses (:class:`~nest_experiments.net.rtnl.HtbRates`).
    """

    def __init__(self, changes: list[Change], path: Path, *, clock: Callable[[], float],
                 rates: Callable[[list[Egress]], RateSetter] = HtbRates) -> None:
        self.changes = changes
        self.path = path
        self.clock = clock
        self.error: BaseException | None = None
        self._open_rates = rates
        self._rates: RateSetter | None = None
        self._sink: CsvSink | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="trace-player", daemon=True)
        self._last: dict[int, tuple[Egress, int]] = {}
        self._late: list[float] = []
        self.skipped = 0

    @classmethod
    def for_run(cls, exp: Experiment, net: Network, run_dir: Path, *, clock: Callable[[], float],
                until_s: float) -> TracePlayer:
        traced = [e for e in net.egresses if _egress_config(exp, e).trace is not None]
        if any(e.routed for e in traced):  # the router runtime: those classes are in its guest
            return cls(changes_for(exp, traced, until_s), run_dir / RATES, clock=clock,
                       rates=functools.partial(GuestRates, router=net.router))
        return cls(changes_for(exp, traced, until_s), run_dir / RATES, clock=clock)

    def open(self) -> None:
        """Open the netlink sockets and the CSV (nothing to do without traces)."""
        if not self.changes:
            return
        egresses = list({id(c.egress): c.egress for c in self.changes}.values())
        self._rates = self._open_rates(egresses)
        self._sink = CsvSink(self.path, FIELDS)

    def start(self) -> None:
        """At the run's t = 0: record the rates the classes were built with, then follow the schedule."""
        if self._sink is None:
            return
        first = [c for c in self.changes if c.t == 0]
        for c in first:
            self._record(c, 0.0)
        self._thread.start()

    def _main(self) -> None:
        pending = [c for c in self.changes if c.t > 0]
        i = 0
        try:
            while i < len(pending) and not self._stop.wait(max(0.0, pending[i].t - self.clock())):
                now = self.clock()
                due: dict[int, Change] = {}
                while i < len(pending) and pending[i].t <= now:
                    self.skipped += id(pending[i].egress) in due
                    due[id(pending[i].egress)] = pending[i]
                    i += 1
                for c in due.values():
                    self._apply(c)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def _apply(self, c: Change) -> None:
        assert self._rates is not None
        self._rates.set(c.egress, c.rate_bps)
        t = self.clock()
        self._late.append(t - c.t)
        self._record(c, t)

    def _record(self, c: Change, t: float) -> None:
        assert self._sink is not None
        self._sink.write({"t": round(t, 4), "t_scheduled": round(c.t, 4), "link": c.egress.link,
                          "direction": c.direction, "node": c.egress.node, "rate_bps": c.rate_bps})
        self._last[id(c.egress)] = (c.egress, c.rate_bps)

    def stop(self, *, keep: bool = True) -> None:
        """Stop, read every class back (it must hold the last rate applied), write ``rates.csv`` (or drop it)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        try:
            if self.error is None and self._rates is not None and keep:
                self._read_back()
        except NestExpError as exc:
            self.error = exc
        finally:
            if self._rates is not None:
                self._rates.close()
            if self._sink is not None:
                self._sink.close(keep=keep)
        if self.error is not None:
            err = self.error
            raise err if isinstance(err, RunError) else RunError(f"trace player: {err}") from err

    def _read_back(self) -> None:
        assert self._rates is not None
        for egress, rate in self._last.values():
            got = self._rates.read(egress)
            if (got.rate_bps, got.ceil_bps) != (rate // 8 * 8, rate // 8 * 8):
                raise RunError(f"trace player: {egress.node}/{egress.dev} class rate {got.rate_bps} bit/s "
                               f"(ceil {got.ceil_bps}) after applying {rate}")

    def summary(self) -> dict[str, Any]:
        """For the manifest: how many changes, how late, how many skipped."""
        if not self.changes:
            return {}
        late = sorted(self._late)
        out: dict[str, Any] = {"changes_applied": len(late), "changes_skipped": self.skipped}
        if late:
            out.update(late_ms_mean=round(1000 * sum(late) / len(late), 2),
                       late_ms_p99=round(1000 * late[int(0.99 * (len(late) - 1))], 2), late_ms_max=round(1000 * late[-1], 2))
        return out

    def warnings(self) -> list[str]:
        """A warning when a change came more than 50 ms late or was skipped."""
        worst = max(self._late, default=0.0)
        if worst <= LATE_WARNING_S and not self.skipped:
            return []
        return [f"trace: rate changes applied up to {1000 * worst:.0f} ms late ({self.skipped} skipped because a "
                "newer one was already due); rates.csv has the times"]


def _egress_config(exp: Experiment, egress: Egress) -> Any:
    link = exp.link(egress.link)
    return link.forward if egress.node == link.a else link.reverse
