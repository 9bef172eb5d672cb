"""The ``shape`` firewall action (``[firewalls.NAME] action = "shape"``) as tc and ip argument lists,
their read-back and their counters. Pure: nothing here runs anything.

A policer (``action = "limit"``, :mod:`nest_experiments.net.nftplan`) drops what
exceeds the rate at once, so the flow's RTT hardly grows; the racing paper's
firewall was "rate-limited ... at 64Kbps using qdisc", a shaper with a queue,
behind which QUIC's RTT grows far above TCP's (its Fig. 19a). Per router with
a shape firewall, per direction the firewall applies to:

- one ifb device ``fw<i><t|f>`` in the router's namespace (``i``: the
  firewall's index among the router's firewalls, ``t``: to_port, ``f``:
  from_port), up, with ``htb 1:`` (default class ``1:1``, rate = ceil = the
  firewall's rate) and a ``pfifo limit QUEUE`` leaf ``10:``, planned by
  :func:`nest_experiments.net.tcplan.plan_egress` (read back as a link's egress);
- on every interface of the router, an ``ingress`` qdisc (``ffff:``) with a
  u32 filter per direction (priority = its index + 1): ``match ip protocol P
  0xff match ip dport|sport PORT 0xffff action mirred egress redirect dev IFB``
  (the port at offset 20/22: an IPv4 header without options, as ours are).

tc's ingress hook runs before netfilter: a matching packet waits in the ifb's
FIFO, leaves it at the rate, and the ifb gives it back to the interface's
ingress path past tc (not classified twice), where the router forwards it. A
packet that finds the FIFO full is dropped there, so the nft counting rule in
the forward hook (nftplan) sees only the packets that left the shaper.
``firewall.csv`` therefore takes a shaper's counters from tc: ``matched`` is
what the u32 filters' mirred actions redirected (every matching packet, IP
bytes, as nft counts), ``dropped_pkts`` the FIFO's drops; a qdisc counts its
drops in packets only, so ``dropped_bytes`` is empty.

The FIFO counts packets (skbs): TSO/GSO/GRO go off on both ends of every link
of the router (:attr:`ShapePlan.no_offloads`), or a sender's 64 KB UDP GSO
super-packet would cross the veth whole and take one place in the queue.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nest_experiments.config import EgressConfig, FirewallConfig, QdiscConfig
from nest_experiments.config import topology as topo
from nest_experiments.net import tcplan

PROTO_NUMBERS = {"udp": 17, "tcp": 6}
PORT_FIELD = {"to_port": "dport", "from_port": "sport"}
INGRESS_HANDLE = "ffff:"
LEAF_HANDLE = "10:"  # tcplan.plan_egress's leaf under htb 1:
IP_PROTOCOL_OFFSET = 8  # the u32 key of "match ip protocol": the 32-bit word at offset 8 (TTL, protocol, checksum)
IP_PORTS_OFFSET = 20  # "match ip sport/dport": the word after a 20-byte IPv4 header (source port, destination port)


@dataclass(frozen=True, kw_only=True)
class Shaper:
    """One direction of one shape firewall: its ifb, its u32 filter's priority and match, the ifb's egress."""

    firewall: str
    direction: str  # to_port | from_port
    proto: str
    port: int
    rate_bps: int
    queue_pkts: int
    ifb: str
    prio: int
    egress: tcplan.EgressPlan  # htb 1: -> class 1:1 -> pfifo 10: on the ifb

    def match(self) -> list[str]:
        return ["match", "ip", "protocol", str(PROTO_NUMBERS[self.proto]), "0xff",
                "match", "ip", PORT_FIELD[self.direction], str(self.port), "0xffff"]

    def keys(self) -> set[tuple[int, int, int]]:
        """The u32 keys the kernel holds for :meth:`match`: (offset, value, mask)."""
        port_shift = 0 if self.direction == "to_port" else 16
        return {(IP_PROTOCOL_OFFSET, PROTO_NUMBERS[self.proto] << 16, 0xFF << 16),
                (IP_PORTS_OFFSET, self.port << port_shift, 0xFFFF << port_shift)}


@dataclass(frozen=True, kw_only=True)
class ShapePlan:
    """The shapers of one router's namespace."""

    ns: str
    router: str
    devs: tuple[str, ...]  # the router's interfaces: an ingress qdisc and every shaper's filter on each
    shapers: tuple[Shaper, ...]
    no_offloads: tuple[tuple[str, str], ...]  # (node, interface): both ends of each of the router's links

    def link_commands(self) -> list[list[str]]:
        """``ip -n NS -batch -`` lines: the ifb devices, up."""
        return [cmd for s in self.shapers for cmd in (["link", "add", s.ifb, "type", "ifb"], ["link", "set", s.ifb, "up"])]

    def filter_commands(self) -> list[tuple[str, ...]]:
        """``tc -n NS`` argument lists: the ingress qdiscs, then the filters that redirect to the ifbs."""
        tc = ("tc", "-n", self.ns)
        out: list[tuple[str, ...]] = [(*tc, "qdisc", "add", "dev", dev, "handle", INGRESS_HANDLE, "ingress")
                                      for dev in self.devs]
        out += [(*tc, "filter", "add", "dev", dev, "parent", INGRESS_HANDLE, "protocol", "ip", "prio", str(s.prio),
                 "u32", *s.match(), "action", "mirred", "egress", "redirect", "dev", s.ifb)
                for dev in self.devs for s in self.shapers]
        return out


def ifb_name(index: int, direction: str) -> str:
    return f"fw{index}{'t' if direction == 'to_port' else 'f'}"


def plan_shapers(firewalls: Sequence[FirewallConfig], spec: topo.TopologySpec,
                 ns_of: Callable[[str], str]) -> list[ShapePlan]:
    """One plan per router with a shape firewall, in the order the routers first appear."""
    by_router: dict[str, list[FirewallConfig]] = {}
    for fw in firewalls:
        by_router.setdefault(fw.router, []).append(fw)
    plans = []
    for router, fws in by_router.items():
        ns = ns_of(router)
        shapers: list[Shaper] = []
        for i, fw in enumerate(fws):
            if fw.action != "shape":
                continue
            assert fw.rate_bps is not None  # config: shape needs a rate
            for d in ("to_port", "from_port") if fw.direction == "both" else (fw.direction,):
                ifb = ifb_name(i, d)
                egress = EgressConfig(rate_bps=fw.rate_bps, qdisc=QdiscConfig(kind="pfifo", params=(("limit", fw.queue_pkts),)))
                shapers.append(Shaper(firewall=fw.name, direction=d, proto=fw.proto, port=fw.port,
                                      rate_bps=fw.rate_bps, queue_pkts=fw.queue_pkts, ifb=ifb, prio=len(shapers) + 1,
                                      egress=tcplan.plan_egress(ns, ifb, egress)))
        if shapers:
            links = spec.links_of(router)
            plans.append(ShapePlan(ns=ns, router=router, devs=tuple(link.ifname(router) for link in links),
                                   shapers=tuple(shapers),
                                   no_offloads=tuple(sorted({(n, link.ifname(n)) for link in links for n in (link.a, link.b)}))))
    return plans


# ---------------------------------------------------------------- read-back


def parse_tc_json(text: str) -> list[dict[str, Any]]:
    """``tc -j`` output; a key printed twice in one object (u32's ``match`` per key) becomes a list of its values."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                out[key] = (out[key] if isinstance(out[key], list) and key == "match" else [out[key]]) + [value]
            else:
                out[key] = [value] if key == "match" else value
        return out

    parsed = json.loads(text, object_pairs_hook=pairs)
    return list(parsed) if isinstance(parsed, list) else []


def compare_links(plan: ShapePlan, shown: Sequence[Mapping[str, Any]]) -> list[str]:
    """The planned ifbs against ``ip -j link show type ifb`` in the router's namespace."""
    links = {str(link.get("ifname")): link for link in shown}
    problems = []
    for s in plan.shapers:
        link = links.get(s.ifb)
        if link is None:
            problems.append(f"{plan.router}: ifb {s.ifb} is missing")
        elif "UP" not in link.get("flags", []):
            problems.append(f"{plan.router}: ifb {s.ifb} is not up")
    return problems


def compare_ingress(plan: ShapePlan, qdiscs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every interface of the router has the ingress qdisc (``tc -j qdisc show``, all devices)."""
    have = {str(q.get("dev")) for q in qdiscs if q.get("kind") == "ingress" and q.get("handle") == INGRESS_HANDLE}
    return [f"{plan.router}/{dev}: no ingress qdisc {INGRESS_HANDLE}" for dev in plan.devs if dev not in have]


def _u32_rules(filters: Sequence[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    """prio -> the u32 rule entries (those with keys) of ``tc -j filter show dev D ingress``."""
    out: dict[int, list[Mapping[str, Any]]] = {}
    for f in filters:
        options = f.get("options", {})
        if f.get("kind") == "u32" and "match" in options:
            out.setdefault(int(f.get("pref", 0)), []).append(f)
    return out


def _keys(rule: Mapping[str, Any]) -> set[tuple[int, int, int]]:
    return {(int(m.get("off", 0)), int(str(m.get("value", "0")), 16), int(str(m.get("mask", "0")), 16))
            for m in rule.get("options", {}).get("match", [])}


def _redirect(rule: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The rule's mirred action if it is an egress redirect (None otherwise)."""
    for action in rule.get("options", {}).get("actions", []):
        if action.get("kind") == "mirred" and action.get("mirred_action") == "redirect" \
                and action.get("direction") == "egress":
            return dict(action)
    return None


def compare_filters(plan: ShapePlan, dev: str, filters: Sequence[Mapping[str, Any]]) -> list[str]:
    """The planned filters of one interface against ``tc -j filter show dev DEV ingress``."""
    rules, problems = _u32_rules(filters), []
    for s in plan.shapers:
        where = f"{plan.router}/{dev} ingress filter prio {s.prio} ({s.firewall}:{s.direction})"
        found = rules.get(s.prio, [])
        if len(found) != 1:
            problems.append(f"{where}: {len(found)} u32 rules, expected 1")
            continue
        if _keys(found[0]) != s.keys():
            problems.append(f"{where}: matches {sorted(_keys(found[0]))}, expected {sorted(s.keys())} "
                            f"({' '.join(s.match())})")
        action = _redirect(found[0])
        if action is None or action.get("to_dev") != s.ifb:
            got = action.get("to_dev") if action else "no egress redirect"
            problems.append(f"{where}: redirects to {got}, expected ifb {s.ifb}")
    return problems


# ---------------------------------------------------------------- counters


def redirected(shaper: Shaper, filters_by_dev: Mapping[str, Sequence[Mapping[str, Any]]]) -> tuple[int, int]:
    """(packets, bytes) the shaper's filters redirected to its ifb, over all the router's interfaces
    (``tc -s -j filter show dev D ingress`` per device)."""
    pkts = size = 0
    for filters in filters_by_dev.values():
        for rule in _u32_rules(filters).get(shaper.prio, []):
            action = _redirect(rule)
            stats = action.get("stats", {}) if action else {}
            pkts += int(stats.get("packets", 0))
            size += int(stats.get("bytes", 0))
    return pkts, size


def leaf_drops(shaper: Shaper, qdiscs: Sequence[Mapping[str, Any]]) -> int:
    """Packets the shaper's FIFO dropped (``tc -s -j qdisc show dev IFB``)."""
    leaf = [q for q in qdiscs if q.get("kind") == "pfifo" and q.get("handle") == LEAF_HANDLE]
    return int(leaf[0].get("drops", 0)) if leaf else 0


def counter_row(plan: ShapePlan, shaper: Shaper, filters_by_dev: Mapping[str, Sequence[Mapping[str, Any]]],
                ifb_qdiscs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A ``firewall.csv`` row (nftplan.COUNTER_FIELDS) of one shaper."""
    pkts, size = redirected(shaper, filters_by_dev)
    return {"firewall": shaper.firewall, "router": plan.router, "direction": shaper.direction, "proto": shaper.proto,
            "port": shaper.port, "action": "shape", "rate_bps": shaper.rate_bps, "matched_pkts": pkts,
            "matched_bytes": size, "dropped_pkts": leaf_drops(shaper, ifb_qdiscs), "dropped_bytes": ""}
