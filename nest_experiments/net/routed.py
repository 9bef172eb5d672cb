"""Links through the router guest (the router runtime, DESIGN §2b): which links, and their host side.

The host kernel here has namespaces, veth, HTB and MPTCP but no ``pie``,
``fq_pie`` or ``netem``. In the router runtime every namespace and every
application runs on the host; a link whose egress needs a qdisc the host
lacks is *routed*: instead of a veth pair its two ends are TAP devices held
by one qemu guest (:mod:`nest_experiments.vm.router`), which bridges them and
applies both egresses' plans (:mod:`~nest_experiments.net.tcplan`, the same
plans as on a veth) on its own NICs (:mod:`~nest_experiments.net.router_agent`).

Slot ``k`` of the guest is one link: NIC ``x<k>`` faces the link's a end
(the TAP in a's namespace), ``y<k>`` its b end. A packet from a to b enters
the guest on ``x<k>`` and leaves on ``y<k>``: a's egress (forward) is
planned on ``y<k>``, b's (reverse) on ``x<k>``.

The TAPs live in the host's root namespace between runs (qemu opened them
there); a run moves each into its node's namespace under the link's
interface name and, before its namespaces go, back to the root namespace
under its own name (a TAP in a namespace that is deleted is deleted with it,
and qemu's file descriptor would be dead for the rest of the sweep). When
the runner dies, qemu dies with it (``PR_SET_PDEATHSIG``) and the kernel
removes its TAPs: nothing is left in the root namespace.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from nest_experiments.config import EgressConfig, LinkConfig, qdisc_kinds
from nest_experiments.errors import ConfigError, NetworkSetupError
from nest_experiments.net.netlink import HtbClass
from nest_experiments.net.procs import RunState, check_run, new_prefix, ns_exec, run_batch
from nest_experiments.net.router_agent import GUEST_NS, nic_name
from nest_experiments.net.rtnl import HtbRates
from nest_experiments.net.tcplan import Egress

#: What the router guest's kernel (Debian's, vm.image) has of the features an egress can need (net.kernel):
#: a link needing only these goes through the guest when the host lacks one of them.
ROUTABLE = frozenset({"htb", "netem", *qdisc_kinds()})  # the guest image has every leaf kind's module (vm.image)

#: HTB's burst (= cburst) on the guest's egresses: its timers fire late under TCG, and with tc's default burst
#: (one MTU) a class then sends less than its rate (the prototype: a never-empty 20 Mbit/s FIFO at 0.88 of the
#: rate; with 15 kB, 0.96-1.00 at 5-20 Mbit/s, PIE's delay unchanged: DESIGN §2b).
ROUTED_HTB_BURST_BYTES = 15_000

__all__ = ["GUEST_NS", "ROUTABLE", "GuestRates", "Router", "RoutedLink", "egress_features", "plan_routed", "routed_count",
           "routes", "unroutable"]


def egress_features(e: EgressConfig) -> set[str]:
    """The kernel features one egress needs (net.kernel's names)."""
    out = set()
    if e.rate_bps is not None:
        out.add("htb")
    if e.needs_netem:
        out.add("netem")
    if e.qdisc is not None:
        out.add(e.qdisc.kind)
    return out


def routes(link: LinkConfig, missing: set[str] | frozenset[str]) -> bool:
    """Whether ``link`` goes through the router guest: an egress of it needs a feature in ``missing``, or the
    file sends it there (``through_router``: the cells of one design on one path, whatever each needs)."""
    return link.through_router or any(egress_features(e) & set(missing) for _, _, e in link.egresses())


def unroutable(missing: Mapping[str, str]) -> dict[str, str]:
    """Of what the host lacks (feature -> config key), what the router runtime cannot provide either."""
    return {f: key for f, key in missing.items() if f not in ROUTABLE}


@dataclass(frozen=True, kw_only=True)
class RoutedLink:
    """One link through the guest: its slot and its two TAPs (their names in the root namespace)."""

    link: str
    slot: int
    a: str
    b: str
    tap_a: str
    tap_b: str

    def guest_dev(self, node: str) -> str:
        """The guest NIC whose egress carries ``node``'s direction of the link (towards its peer)."""
        return nic_name(self.slot, "b" if node == self.a else "a")

    def tap(self, node: str) -> str:
        return self.tap_a if node == self.a else self.tap_b


def plan_routed(links: Sequence[LinkConfig], missing: set[str] | frozenset[str], taps: Sequence[tuple[str, str]],
                ends: Mapping[str, tuple[str, str]]) -> list[RoutedLink]:
    """The links through the guest (:func:`routes`: an egress needs a feature in ``missing``, or the file says
    ``through_router``), each on the next free slot (``taps`` are
    the slots' TAP names, ``ends`` each link's (a, b) nodes); more such links than slots raises ValueError."""
    names = [link.name for link in links if routes(link, missing)]
    if len(names) > len(taps):
        raise ValueError(f"{len(names)} links need the router guest ({', '.join(names)}) but it has {len(taps)} slots")
    return [RoutedLink(link=name, slot=k, a=ends[name][0], b=ends[name][1], tap_a=taps[k][0], tap_b=taps[k][1])
            for k, name in enumerate(names)]


def routed_count(links: Sequence[LinkConfig], missing: set[str] | frozenset[str]) -> int:
    """How many of ``links`` go through the router guest (its slots)."""
    return sum(routes(link, missing) for link in links)


class Router(Protocol):
    """What :class:`~nest_experiments.net.network.Network` and the collectors need of the router guest
    (:class:`nest_experiments.vm.router.RouterVM`; a fake in unit tests)."""

    @property
    def missing(self) -> frozenset[str]: ...  # the features the host lacks: what the guest provides

    @property
    def taps(self) -> tuple[tuple[str, str], ...]: ...  # per slot, (a's TAP, b's TAP) in the root namespace

    @property
    def pid(self) -> int | None: ...  # qemu's (the CPU monitor watches it)

    def call(self, op: str, **args: Any) -> dict[str, Any]: ...  # one request to the agent (raises on error)

    def host_time(self, t_guest: float) -> float: ...  # a guest monotonic time on the host's monotonic clock

    def sync_clock(self) -> tuple[float, float]: ...  # measure the clock offset again: (offset, its error bound)

    def summary(self) -> dict[str, Any]: ...  # for the manifest

    def annotate(self, manifest: dict[str, Any]) -> None: ...  # the host's steal and qemu's threads over the run


def tap_in_commands(r: RoutedLink, node: str, ns: str, ifname: str, address: str, mtu: int) -> tuple[list[str], list[list[str]]]:
    """The move of ``node``'s TAP into ``ns`` (one ``ip`` in the root namespace) and, in ``ns``, its name, MTU,
    address and state (one ``ip -n ns -batch``)."""
    tap = r.tap(node)
    move = ["ip", "link", "set", "dev", tap, "netns", ns]
    inside = [["link", "set", "dev", tap, "name", ifname], ["link", "set", "dev", ifname, "mtu", str(mtu)],
              ["addr", "add", address, "dev", ifname], ["link", "set", "dev", ifname, "up"]]
    return move, inside


def tap_out_commands(tap: str, ifname: str) -> list[list[str]]:
    """Back to the root namespace (this process's) under the TAP's own name (an ``ip -n ns -batch``)."""
    return [["link", "set", "dev", ifname, "down"], ["link", "set", "dev", ifname, "name", tap],
            ["link", "set", "dev", tap, "netns", str(os.getpid())]]


class GuestRates:
    """HTB rate changes of egresses, the routed ones through the router guest's agent (one request per change,
    acknowledged by the guest's kernel), the others over netlink on the host (:class:`~nest_experiments.net.rtnl.HtbRates`):
    what :class:`nest_experiments.runs.traceplay.TracePlayer` needs of a rate setter."""

    def __init__(self, egresses: list[Egress], router: Router | None) -> None:
        self.router = router
        host = [e for e in egresses if not e.routed]
        if len(host) < len(egresses) and router is None:
            raise NetworkSetupError("a routed egress without the router guest")
        for e in egresses:
            if e.plan.htb_class is None:
                raise ConfigError(f"links.{e.link}", f"the egress at {e.node} has no rate (HTB class) to change")
        self.host = HtbRates(host) if host else None

    def set(self, egress: Egress, rate_bps: int) -> None:
        if not egress.routed:
            assert self.host is not None
            self.host.set(egress, rate_bps)
            return
        assert self.router is not None and egress.plan.htb_class is not None
        self.router.call("rate", dev=egress.plan.dev, classid=egress.plan.htb_class, rate_bps=rate_bps,
                         burst_bytes=egress.plan.htb_burst_bytes)

    def read(self, egress: Egress) -> HtbClass:
        if not egress.routed:
            assert self.host is not None
            return self.host.read(egress)
        assert self.router is not None
        classes = self.router.call("classes", devs=[egress.plan.dev])["classes"].get(egress.plan.dev, {})
        if egress.plan.htb_class not in classes:
            raise NetworkSetupError(f"{egress.node}/{egress.dev}: no HTB class {egress.plan.htb_class} in the router guest")
        return HtbClass(**classes[egress.plan.htb_class])

    def close(self) -> None:
        if self.host is not None:
            self.host.close()


# ---------------------------------------------------------------- the guest path's own latency


CALIBRATION_PINGS = 300
CALIBRATION_INTERVAL_S = 0.01
_RTT = re.compile(r"time=(\d+(?:\.\d+)?) ms")


def parse_ping_rtts(text: str) -> list[float]:
    """Each reply's RTT (ms) of ``ping``'s output."""
    return [float(m.group(1)) for m in _RTT.finditer(text)]


def rtt_figures(rtts: Sequence[float], sent: int) -> dict[str, Any]:
    """min / p50 / p99 / max (ms) and the share lost of a calibration's RTTs."""
    if not rtts:
        return {"sent": sent, "received": 0}
    s = sorted(rtts)

    def q(p: float) -> float:
        return round(s[min(len(s) - 1, int(p * len(s)))], 3)

    return {"sent": sent, "received": len(s), "min_ms": round(s[0], 3), "p50_ms": q(0.5), "p99_ms": q(0.99),
            "max_ms": round(s[-1], 3), "mean_ms": round(sum(s) / len(s), 3)}


def calibrate(router: Router, *, pings: int = CALIBRATION_PINGS) -> dict[str, Any]:
    """The guest path's round trip with nothing queued, every slot at once (as a run uses them): per slot, two
    throw-away namespaces holding its TAPs, ``ping -i 0.01`` from a's end to b's through the guest's bridge (both
    directions cross it: one way is about half). The TAPs go back to the root namespace and the namespaces are
    removed whatever happens (listed in a run state first, so that a later run removes them after a kill -9)."""
    state = RunState(prefix=new_prefix())
    names = [(f"{state.prefix}-c{k}a", f"{state.prefix}-c{k}b") for k in range(len(router.taps))]
    state.namespaces = [n for pair in names for n in pair]
    state.save()
    moved: list[tuple[str, str]] = []
    try:
        for k, ((ta, tb), (na, nb)) in enumerate(zip(router.taps, names, strict=True)):
            for ns, tap, host in ((na, ta, 1), (nb, tb, 2)):
                check_run(["ip", "netns", "add", ns], what="router calibration")
                check_run(["ip", "link", "set", "dev", tap, "netns", ns], what="router calibration")
                moved.append((ns, tap))
                run_batch(["ip", "-n", ns], [["addr", "add", f"10.254.{k}.{host}/24", "dev", tap],
                                             ["link", "set", "dev", tap, "up"], ["link", "set", "dev", "lo", "up"]],
                          what="router calibration")
        procs = [subprocess.Popen(ns_exec(na, ["ping", "-n", "-i", str(CALIBRATION_INTERVAL_S), "-c", str(pings),
                                               "-W", "1", f"10.254.{k}.2"]), stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
                 for k, (na, _) in enumerate(names)]
        outputs = [p.communicate(timeout=pings * 0.1 + 30)[0] for p in procs]
    finally:
        for ns, tap in moved:
            run_batch(["ip", "-n", ns], [["link", "set", "dev", tap, "down"],
                                         ["link", "set", "dev", tap, "netns", str(os.getpid())]],
                      what="router calibration", force=True)
        state.remove()
    per_slot = [rtt_figures(parse_ping_rtts(out), pings) for out in outputs]
    return {"pings_per_slot": pings, "interval_s": CALIBRATION_INTERVAL_S,
            "all": rtt_figures([r for out in outputs for r in parse_ping_rtts(out)], pings * len(outputs)),
            "slots": per_slot}


# ---------------------------------------------------------------- what the guest can forward

#: The most a run may send through the router guest (the sum over its routed egresses of their highest rate):
#: under TCG the guest forwards in software, ~0.45 of a host CPU per 5 Mbit/s pipe (DESIGN §2b); above this its
#: vCPU, not the qdisc, would set the pace (bench/router_path.py measures the guest's busy share per rate).
ROUTED_RATE_LIMIT_BPS = 80_000_000


def check_capacity(duration_s: float, links: Sequence[LinkConfig], missing: set[str] | frozenset[str],
                   limit_bps: int = ROUTED_RATE_LIMIT_BPS) -> None:
    """Refuse, naming the key, a run whose routed egresses add up to more than the guest can forward."""
    total, where = 0, ""
    for link in links:
        if not routes(link, missing):
            continue
        for direction, e in (("forward", link.forward), ("reverse", link.reverse)):
            steps = e.trace_steps(duration_s)
            rate = max((r for _, r in steps), default=e.rate_bps or 0)
            if rate:
                total += rate
                where = where or f"links.{link.name}.{'rate' if not steps else direction + '.trace'}"
    if total > limit_bps:
        raise ConfigError(where, f"the links through the router guest add up to {total / 1e6:g} Mbit/s, more than "
                                 f"its emulated CPU forwards ({limit_bps / 1e6:g} Mbit/s in all): lower the rates, "
                                 "or run on a kernel that has the qdiscs (--runtime host)")
