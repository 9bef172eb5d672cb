"""Netlink sockets inside the run's namespaces: HTB rate changes, class and qdisc dumps, no process per request.

A socket is opened by this thread entering the namespace briefly
(:func:`route_socket`) and stays in it, whichever thread uses it. The
messages are built and read by pure code: :mod:`nest_experiments.net.netlink`
(HTB classes, qdisc dumps).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence

from nest_experiments.errors import ConfigError, NetworkSetupError, RunError
from nest_experiments.net import netlink
from nest_experiments.net.netlink import (
    NLMSG_DONE,
    NLMSG_ERROR,
    RTM_NEWQDISC,
    NetlinkError,
    QdiscMessage,
    netlink_error,
    netlink_messages,
    qdisc_dump_request,
    qdisc_message,
)
from nest_experiments.net.procs import in_netns
from nest_experiments.net.tcplan import Egress


def route_socket(ns: str) -> tuple[socket.socket, dict[str, int]]:
    """A bound NETLINK_ROUTE socket inside namespace ``ns``, and that namespace's interfaces (name -> index)."""
    with in_netns(ns):
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        names = {name: index for index, name in socket.if_nameindex()}
    sock.bind((0, 0))
    return sock, names


class HtbRates:
    """Rate changes of HTB classes over netlink: one socket per namespace, no process per change.

    For trace-driven links (:mod:`nest_experiments.runs.traceplay`): :meth:`set`
    sends what ``tc class change ... htb rate R ceil R`` sends
    (:mod:`~nest_experiments.net.netlink`) and waits for the kernel's
    acknowledgement, so a refused change raises :class:`NetworkSetupError` at
    once; :meth:`read` dumps the class back from the kernel. Only the class
    changes: the leaf qdisc and its backlog stay. The sockets stay in the
    namespaces they were opened in, whichever thread uses them.
    """

    def __init__(self, egresses: list[Egress]) -> None:
        self._socks: dict[str, socket.socket] = {}
        self._index: dict[tuple[str, str], int] = {}
        self._seq = 0
        try:
            for egress in egresses:
                self._open(egress)
        except BaseException:
            self.close()
            raise

    def _open(self, egress: Egress) -> None:
        if egress.plan.htb_class is None:
            raise ConfigError(f"links.{egress.link}", f"the egress at {egress.node} has no rate (HTB class) to change")
        if egress.ns not in self._socks:
            sock, names = route_socket(egress.ns)
            sock.settimeout(5.0)
            self._socks[egress.ns] = sock
            self._index.update({(egress.ns, name): index for name, index in names.items()})
        if (egress.ns, egress.dev) not in self._index:
            raise NetworkSetupError(f"no interface {egress.dev} in {egress.ns}")

    def set(self, egress: Egress, rate_bps: int) -> None:
        """rate = ceil = ``rate_bps`` on the egress's HTB class; raises when the kernel refuses."""
        assert egress.plan.htb_class is not None
        self._seq += 1
        msg = netlink.change_request(index=self._index[(egress.ns, egress.dev)], classid=egress.plan.htb_class,
                                      parent=egress.plan.htb_class.split(":")[0] + ":", rate_bps=rate_bps, seq=self._seq)
        self._exchange(egress, msg, dump=False)

    def read(self, egress: Egress) -> netlink.HtbClass:
        """The egress's HTB class as the kernel has it now."""
        self._seq += 1
        index = self._index[(egress.ns, egress.dev)]
        assert egress.plan.htb_class is not None
        want = netlink.parse_handle(egress.plan.htb_class)
        found = [c for c in self._exchange(egress, netlink.dump_request(index=index, seq=self._seq), dump=True)
                 if c.index == index and c.classid == want]
        if not found:
            raise NetworkSetupError(f"{egress.node}/{egress.dev}: no HTB class {egress.plan.htb_class} in the kernel")
        return found[0]

    def _exchange(self, egress: Egress, msg: bytes, *, dump: bool) -> list[netlink.HtbClass]:
        return _exchange(self._socks[egress.ns], msg, self._seq, where=f"{egress.node}/{egress.dev}", dump=dump)

    def close(self) -> None:
        for sock in self._socks.values():
            sock.close()
        self._socks.clear()


def _exchange(sock: socket.socket, msg: bytes, seq_sent: int, *, where: str, dump: bool) -> list[netlink.HtbClass]:
    """Send a class request (``seq_sent``), read to its answer: the ack of a change (raises when refused) or the
    dump's HTB classes."""
    out: list[netlink.HtbClass] = []
    try:
        sock.send(msg)
        while True:
            for kind, seq, payload in netlink_messages(sock.recv(1 << 16)):
                if seq != seq_sent:
                    continue
                if kind == NLMSG_ERROR:
                    code = netlink_error(payload)
                    if code:
                        raise NetworkSetupError(f"HTB class {'dump' if dump else 'change'} on {where} refused: "
                                                f"{os.strerror(-code)}")
                    return out  # the ack of a change
                if kind == NLMSG_DONE:
                    return out
                if dump and kind == netlink.RTM_NEWTCLASS and (c := netlink.htb_class(payload)) is not None:
                    out.append(c)
    except (OSError, NetlinkError) as exc:
        raise NetworkSetupError(f"HTB class on {where} over netlink: {exc}") from exc


def htb_rates(ns: str, devs: Sequence[str]) -> dict[str, dict[str, int]]:
    """Per interface of ``devs`` in namespace ``ns``, its HTB classes' rates ({"1:1": bit/s}), as ``tc class show``
    prints them, read in-process (one dump per interface on one socket; ``tc`` is a process, ~0.3 s under TCG)."""
    if not devs:
        return {}  # no HTB class to read: no socket
    sock, names = route_socket(ns)
    try:
        sock.settimeout(5.0)
        out: dict[str, dict[str, int]] = {}
        for seq, dev in enumerate(devs, start=1):
            if dev not in names:
                raise NetworkSetupError(f"no interface {dev} in {ns}")
            classes = _exchange(sock, netlink.dump_request(index=names[dev], seq=seq), seq, where=f"{ns}/{dev}", dump=True)
            out[dev] = {netlink.format_handle(c.classid): c.rate_bps for c in classes if c.index == names[dev]}
        return out
    finally:
        sock.close()


class QdiscDumper:
    """A netlink socket inside namespace ``ns`` (opened by this thread entering it briefly) that dumps qdiscs.

    pyroute2's own ``IPRoute(netns=...)`` forks a child of this process to
    open it; in the TCG VM, forking a process that has numpy loaded took
    over 20 s. A netlink socket stays in the namespace it was created in.
    """

    def __init__(self, ns: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.ns = ns
        self.clock = clock
        self.t_request = 0.0  # on ``clock``, the middle of the last dump request's send (when the kernel dumped)
        self._seq = 0
        try:
            self.sock, self._indexes = route_socket(ns)
        except NetworkSetupError as exc:
            raise RunError(f"qdisc sampler: {exc}") from exc

    def index(self, dev: str) -> int | None:
        return self._indexes.get(dev)

    def dump(self, index: int) -> list[QdiscMessage]:
        """Every qdisc on interface ``index``."""
        self._seq += 1
        request = qdisc_dump_request(index, self._seq)
        before = self.clock()
        self.sock.send(request)
        self.t_request = (before + self.clock()) / 2
        out: list[QdiscMessage] = []
        while True:
            try:
                messages = list(netlink_messages(self.sock.recv(1 << 16)))
            except NetlinkError as exc:
                raise RunError(f"qdisc sampler: {self.ns}: {exc}") from exc
            for kind, seq, payload in messages:
                if seq != self._seq:
                    continue
                if kind == NLMSG_DONE:
                    return out
                if kind == NLMSG_ERROR and netlink_error(payload):
                    raise RunError(f"qdisc sampler: qdisc dump in {self.ns}: {os.strerror(-netlink_error(payload))}")
                if kind == RTM_NEWQDISC:
                    msg = qdisc_message(payload)
                    if msg.index == index:
                        out.append(msg)

    def close(self) -> None:
        self.sock.close()
