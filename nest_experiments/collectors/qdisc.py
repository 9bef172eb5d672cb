"""Qdisc sampler: every qdisc on the sampled egresses, read over netlink.

One thread, one netlink socket per namespace (a ``tc`` process per sample
would cost 2-700 ms). The socket is a plain one and the dump request and
replies go through pyroute2's ``tcmsg`` (encoding, decoding the kind's
statistics): pyroute2's ``IPRoute`` runs each request through an asyncio
loop, which in the TCG VM cost ~50 ms of guest CPU per egress and sample
(13-16 s of CPU in a 65 s run at one sample of 4 egresses per second;
``runner_threads_cpu_s`` in the manifest). Samples are taken on a fixed monotonic schedule; a late tick is taken at
once and the schedule kept (no drift). Rows go to ``qdisc.csv`` (DESIGN §4).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nest_experiments.errors import NetworkSetupError, RunError
from nest_experiments.parsers.tcstats import qdisc_row
from nest_experiments.procs import in_netns
from nest_experiments.rundir import CsvSink

FIELDS = ("t", "node", "dev", "link", "kind", "handle", "parent", "backlog_bytes", "backlog_pkts", "drops",
          "overlimits", "sent_pkts", "sent_bytes", "delay_ms", "prob")


class QdiscDumper:
    """A netlink socket inside namespace ``ns`` (opened by this thread entering it briefly) that dumps qdiscs.

    pyroute2's own ``IPRoute(netns=...)`` forks a child of this process to
    open it; in the TCG VM, forking a process that has numpy loaded took
    over 20 s. A netlink socket stays in the namespace it was created in.
    """

    def __init__(self, ns: str) -> None:
        self.ns = ns
        self._seq = 0
        try:
            with in_netns(ns):
                self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
                self._indexes = {name: index for index, name in socket.if_nameindex()}
        except NetworkSetupError as exc:
            raise RunError(f"qdisc sampler: {exc}") from exc
        self.sock.bind((0, 0))

    def index(self, dev: str) -> int | None:
        return self._indexes.get(dev)

    def dump(self, index: int) -> list[Any]:
        """The decoded ``tcmsg`` of every qdisc on interface ``index``."""
        from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR
        from pyroute2.netlink.rtnl import RTM_GETQDISC, RTM_NEWQDISC
        from pyroute2.netlink.rtnl.tcmsg import tcmsg

        self._seq += 1
        req = tcmsg()
        req["header"]["type"] = RTM_GETQDISC
        req["header"]["flags"] = NLM_F_REQUEST | NLM_F_DUMP
        req["header"]["sequence_number"] = self._seq
        req["index"] = index
        req.encode()
        self.sock.send(req.data)
        out: list[Any] = []
        while True:
            data = self.sock.recv(1 << 16)
            offset = 0
            while offset + 16 <= len(data):
                length, kind, _flags, seq, _pid = struct.unpack_from("=IHHII", data, offset)
                if length < 16:
                    raise RunError(f"qdisc sampler: malformed netlink reply in {self.ns}")
                if seq == self._seq:
                    if kind == NLMSG_DONE:
                        return out
                    if kind == NLMSG_ERROR:
                        (code,) = struct.unpack_from("=i", data, offset + 16)
                        if code:
                            raise RunError(f"qdisc sampler: qdisc dump in {self.ns}: {os.strerror(-code)}")
                    elif kind == RTM_NEWQDISC:
                        msg = tcmsg(data[offset:offset + length])
                        msg.decode()
                        if msg["index"] == index:
                            out.append(msg)
                offset += (length + 3) & ~3

    def close(self) -> None:
        self.sock.close()


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
                 clock: Callable[[], float]) -> None:
        self.path = path
        self.targets = list(targets)
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
            dumper = self._sockets.get(ns) or QdiscDumper(ns)
            self._sockets[ns] = dumper
            found = dumper.index(dev)
            if found is None:
                raise RunError(f"qdisc sampler: no interface {dev} in {ns}")
            self._index[(ns, dev)] = found

    def sample(self) -> None:
        t = round(self.clock(), 4)
        for ns, node, dev, link in self.targets:
            for msg in self._sockets[ns].dump(self._index[(ns, dev)]):
                row = qdisc_row(msg.get_attr("TCA_KIND"), msg.get_attr("TCA_STATS") or {}, msg.get_attr("TCA_XSTATS"))
                row.update(t=t, node=node, dev=dev, link=link, handle=_handle(msg["handle"]), parent=_parent(msg["parent"]))
                self.sink.write(row)

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
