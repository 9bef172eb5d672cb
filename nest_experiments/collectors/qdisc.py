"""Qdisc sampler: every qdisc on the sampled egresses, read over netlink.

One thread, one netlink socket per namespace (a ``tc`` process per sample
would cost 2-700 ms). The socket is a plain one, and the dump is encoded and
decoded by :mod:`nest_experiments.net.netlink`, which reads only the
attributes a row needs: pyroute2's ``IPRoute`` (an asyncio loop per request,
a generic attribute decoder) cost 50-130 ms of guest CPU per egress and
sample in the TCG VM, 11-16 s of CPU in a 65 s run at one sample of 4
egresses per second (``runner_threads_cpu_s`` in the manifest).
``tests/integration/test_qdisc_dumper.py`` checks the rows against pyroute2's.
Samples are taken on a fixed monotonic schedule; a late tick is taken at
once and the schedule kept (no drift). Each egress's rows carry, as ``t``,
the time of its own dump: the run clock around the netlink request (the
kernel fills a small dump while it handles the request), not the time the
tick began, so that a thread that lost the CPU (or, in the VM, a vCPU that
the host descheduled) between the two cannot misplace a sample. Rows go to
``qdisc.csv`` (DESIGN §4).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from nest_experiments.errors import RunError
from nest_experiments.net.routed import Router
from nest_experiments.net.rtnl import QdiscDumper
from nest_experiments.parsers.tcstats import qdisc_row
from nest_experiments.rundir import CsvSink

FIELDS = ("t", "node", "dev", "link", "kind", "handle", "parent", "backlog_bytes", "backlog_pkts", "drops",
          "overlimits", "sent_pkts", "sent_bytes", "delay_ms", "prob", "ecn_marks")


def _handle(value: int) -> str:
    return f"{value >> 16:x}:" if value & 0xFFFF == 0 else f"{value >> 16:x}:{value & 0xFFFF:x}"


def _parent(value: int) -> str:
    return "root" if value == 0xFFFFFFFF else _handle(value)


class QdiscSampler:
    """Samples ``targets`` = [(ns, node, dev, link)] every ``interval_s`` into ``path``.

    One thread owns the netlink sockets from opening to closing (pyroute2's
    sockets are bound to the thread that made them): :meth:`open` starts it
    and returns when the sockets are open, :meth:`start` takes the first
    sample and starts the schedule, :meth:`stop` takes the last one.
    """

    def __init__(self, path: Path, targets: Sequence[tuple[str, str, str, str]], *, interval_s: float,
                 clock: Callable[[], float], router: Router | None = None,
                 guest_targets: Sequence[tuple[str, str, str, str]] = ()) -> None:
        self.path = path
        self.targets = list(targets)
        # the router runtime: [(guest NIC, node, dev, link)] whose qdiscs are in its guest (net.routed), dumped there
        self.router = router
        self.guest_targets = list(guest_targets)
        self.guest_cpu: list[tuple[float, list[int]]] = []  # (run clock, the guest's /proc/stat counters) per sample
        self.interval_s = interval_s
        self.clock = clock
        self._ready = threading.Event()
        self._go = threading.Event()
        self._first = threading.Event()
        self._stop = threading.Event()
        self._keep = True
        self._thread = threading.Thread(target=self._main, name="qdisc-sampler", daemon=True)
        self._sockets: dict[str, QdiscDumper] = {}
        self._index: dict[tuple[str, str], int] = {}
        self.error: BaseException | None = None
        self.sink = CsvSink(path, FIELDS)

    def open(self) -> None:
        """Open the netlink sockets (before the run clock starts)."""
        self._thread.start()
        self._ready.wait()
        if self.error is not None:
            self._thread.join()
            raise self._failure()

    def start(self) -> None:
        """The first sample (before any traffic starts), then one every interval."""
        if not self._thread.is_alive() and not self._ready.is_set():
            self.open()
        self._go.set()
        self._first.wait()
        if self.error is not None:
            raise self._failure()

    def _main(self) -> None:
        try:
            self._open_sockets()
            self._ready.set()
            self._go.wait()
            if not self._stop.is_set():
                self.sample()
                self._first.set()
                self._loop()
                if self._keep:
                    self.sample()
        except BaseException as exc:  # reported by open()/start()/stop()
            self.error = exc
        finally:
            for dumper in self._sockets.values():
                dumper.close()
            self._ready.set()
            self._first.set()

    def _open_sockets(self) -> None:
        for ns, _, dev, _ in self.targets:
            dumper = self._sockets.get(ns) or QdiscDumper(ns, clock=self.clock)
            self._sockets[ns] = dumper
            found = dumper.index(dev)
            if found is None:
                raise RunError(f"qdisc sampler: no interface {dev} in {ns}")
            self._index[(ns, dev)] = found

    def sample(self) -> None:
        if self.guest_targets:
            self._sample_guest()
        for ns, node, dev, link in self.targets:
            dumper = self._sockets[ns]
            messages = dumper.dump(self._index[(ns, dev)])
            t = round(dumper.t_request, 4)
            for msg in messages:
                row = qdisc_row(msg.kind, msg.stats, msg.xstats)
                row.update(t=t, node=node, dev=dev, link=link, handle=_handle(msg.handle), parent=_parent(msg.parent))
                self.sink.write(row)

    def _sample_guest(self) -> None:
        """One dump of every guest target in one request; its times from the guest's clock to the run's."""
        assert self.router is not None
        answer = self.router.call("dump", devs=[g for g, _, _, _ in self.guest_targets])
        now_host, now_run = time.monotonic(), self.clock()
        where = {g: (node, dev, link) for g, node, dev, link in self.guest_targets}
        for sample in answer["samples"]:
            node, dev, link = where[sample["dev"]]
            t = round(now_run - (now_host - self.router.host_time(float(sample["t"]))), 4)
            for row in sample["rows"]:
                row.update(t=t, node=node, dev=dev, link=link, handle=_handle(int(row["handle"])),
                           parent=_parent(int(row["parent"])))
                self.sink.write(row)
        self.guest_cpu.append((round(now_run - (now_host - self.router.host_time(float(answer["t"]))), 4),
                               [int(v) for v in answer["cpu"]]))

    def _loop(self) -> None:
        next_t = time.monotonic() + self.interval_s
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            self.sample()
            next_t += self.interval_s
            if next_t < time.monotonic():  # fell behind: keep the grid, skip missed ticks
                next_t += self.interval_s * int((time.monotonic() - next_t) / self.interval_s + 1)

    def stop(self, *, keep: bool = True) -> None:
        """Take a last sample, stop, close the sockets, write the file (or drop it)."""
        self._keep = keep
        self._stop.set()
        self._go.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.sink.close(keep=keep and self.error is None)
        if self.error is not None:
            raise self._failure()

    def _failure(self) -> RunError:
        err = self.error
        return err if isinstance(err, RunError) else RunError(f"qdisc sampler failed: {err}")
