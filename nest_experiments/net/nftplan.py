"""Firewall plans (``[firewalls.NAME]``) as nftables rules, their read-back and their counters. Pure.

Every router with a firewall gets one table, ``inet nest_experiments``, with
one chain on the ``forward`` hook (policy accept) in its namespace. Each
firewall gives, per direction it applies to (``to_port``: ``PROTO dport
PORT``, ``from_port``: ``PROTO sport PORT``), two rules:

- ``<name>:<direction>:matched``: a counter of every matching packet;
- ``<name>:<direction>:dropped`` (``limit`` and ``drop`` only, :data:`DROPPING`): for
  ``limit``, ``limit rate over R bytes/second [burst B bytes] counter drop``
  (a policer: what exceeds the rate is dropped; nftables' byte bucket holds one
  second of the rate plus the burst); for ``drop``, ``counter drop``.

A ``shape`` firewall has the counting rule only: its queue is a tc shaper on
the router's ingress (:mod:`nest_experiments.net.fwshape`), before this hook, so
the rule counts what left the shaper, and ``firewall.csv`` takes that
firewall's counters from tc instead.

The comments name the rules, so that the read-back finds each one and the
counters go into ``firewall.csv`` per firewall and direction.
:func:`script` is the input of ``nft -f -`` (one transaction), made from
validated values only (names of ``[a-z0-9_]``, integers, ``udp``/``tcp``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nest_experiments.config import FirewallConfig

FAMILY = "inet"
TABLE = "nest_experiments"
CHAIN = "forward"
PORT_FIELD = {"to_port": "dport", "from_port": "sport"}
BYTE_UNITS = {"bytes": 1, "kbytes": 1024, "mbytes": 1024 * 1024}
DROPPING = ("limit", "drop")  # the actions with a dropping rule here
COUNTER_FIELDS = ("firewall", "router", "direction", "proto", "port", "action", "rate_bps", "matched_pkts",
                  "matched_bytes", "dropped_pkts", "dropped_bytes")


@dataclass(frozen=True, kw_only=True)
class RulePlan:
    """One direction of one firewall: its counting rule and (``limit``, ``drop``) its dropping rule."""

    firewall: str
    direction: str  # to_port | from_port
    proto: str
    port: int
    action: str
    rate_bytes_s: int | None
    burst_bytes: int
    rate_bps: int | None

    def comment(self, what: str) -> str:
        return f"{self.firewall}:{self.direction}:{what}"

    def match(self) -> list[str]:
        return [self.proto, PORT_FIELD[self.direction], str(self.port)]

    def rules(self) -> list[list[str]]:
        """The ``add rule`` arguments after the chain's name."""
        out = [[*self.match(), "counter", "comment", f'"{self.comment("matched")}"']]
        if self.action == "limit":
            burst = ["burst", str(self.burst_bytes), "bytes"] if self.burst_bytes else []
            out.append([*self.match(), "limit", "rate", "over", str(self.rate_bytes_s), "bytes/second", *burst,
                        "counter", "drop", "comment", f'"{self.comment("dropped")}"'])
        elif self.action == "drop":
            out.append([*self.match(), "counter", "drop", "comment", f'"{self.comment("dropped")}"'])
        return out


@dataclass(frozen=True, kw_only=True)
class FirewallPlan:
    """The rules of one router's namespace."""

    ns: str
    router: str
    rules: tuple[RulePlan, ...]

    def script(self) -> str:
        """``nft -f -`` input: the table, its chain, the rules (one transaction: all or nothing)."""
        lines = [f"add table {FAMILY} {TABLE}",
                 f"add chain {FAMILY} {TABLE} {CHAIN} {{ type filter hook forward priority 0 ; policy accept ; }}"]
        for rule in self.rules:
            lines += [" ".join(["add", "rule", FAMILY, TABLE, CHAIN, *args]) for args in rule.rules()]
        return "".join(line + "\n" for line in lines)


def plan_firewalls(firewalls: Sequence[FirewallConfig], ns_of: Callable[[str], str]) -> list[FirewallPlan]:
    """One plan per router that has a firewall, in the order the routers first appear."""
    by_router: dict[str, list[RulePlan]] = {}
    for fw in firewalls:
        directions = ("to_port", "from_port") if fw.direction == "both" else (fw.direction,)
        by_router.setdefault(fw.router, []).extend(
            RulePlan(firewall=fw.name, direction=d, proto=fw.proto, port=fw.port, action=fw.action,
                     rate_bytes_s=None if fw.rate_bps is None else fw.rate_bps // 8, burst_bytes=fw.burst_bytes,
                     rate_bps=fw.rate_bps)
            for d in directions)
    return [FirewallPlan(ns=ns_of(router), router=router, rules=tuple(rules)) for router, rules in by_router.items()]


# ---------------------------------------------------------------- read-back (nft -j list table inet nest_experiments)


def listed_rules(listing: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """comment -> the rule's expressions, of our table's chain in ``nft -j`` output."""
    out = {}
    for item in listing.get("nftables", []):
        rule = item.get("rule")
        if rule and rule.get("table") == TABLE and rule.get("chain") == CHAIN and "comment" in rule:
            out[str(rule["comment"])] = list(rule.get("expr", []))
    return out


def _chain_ok(listing: Mapping[str, Any]) -> bool:
    chains = [i["chain"] for i in listing.get("nftables", []) if "chain" in i]
    return any(c.get("table") == TABLE and c.get("name") == CHAIN and c.get("hook") == "forward"
               and c.get("policy", "accept") == "accept" for c in chains)


def _matches_port(expr: list[dict[str, Any]], rule: RulePlan) -> bool:
    for e in expr:
        m = e.get("match", {})
        payload = m.get("left", {}).get("payload", {})
        if (payload.get("protocol"), payload.get("field")) == (rule.proto, PORT_FIELD[rule.direction]):
            return m.get("op") == "==" and m.get("right") == rule.port
    return False


def _limit_problem(expr: list[dict[str, Any]], rule: RulePlan) -> str | None:
    limits = [e["limit"] for e in expr if "limit" in e]
    if rule.action != "limit":
        return "has a limit" if limits else None
    if len(limits) != 1:
        return "has no limit"
    lim = limits[0]
    rate = int(lim.get("rate", 0)) * BYTE_UNITS.get(str(lim.get("rate_unit", "")), 0)
    burst = int(lim.get("burst", 0)) * BYTE_UNITS.get(str(lim.get("burst_unit", "bytes")), 0)
    if not lim.get("inv") or lim.get("per") != "second" or rate != rule.rate_bytes_s or burst != rule.burst_bytes:
        return (f"limit is {'over ' if lim.get('inv') else ''}{rate} bytes/{lim.get('per')} burst {burst}, "
                f"planned over {rule.rate_bytes_s} bytes/second burst {rule.burst_bytes}")
    return None


def compare(plan: FirewallPlan, listing: Mapping[str, Any]) -> list[str]:
    """What differs between the plan and the kernel's table (``nft -j list table``); [] when they agree."""
    where = f"{plan.router}: nft table {FAMILY} {TABLE}"
    if not _chain_ok(listing):
        return [f"{where}: no chain {CHAIN} on the forward hook with policy accept"]
    listed, problems = listed_rules(listing), []
    for rule in plan.rules:
        wanted = ["matched"] + (["dropped"] if rule.action in DROPPING else [])
        for what in wanted:
            expr = listed.get(rule.comment(what))
            if expr is None:
                problems.append(f"{where}: rule {rule.comment(what)!r} is missing")
                continue
            if not _matches_port(expr, rule):
                problems.append(f"{where}: rule {rule.comment(what)!r} does not match {' '.join(rule.match())}")
            if not any("counter" in e for e in expr):
                problems.append(f"{where}: rule {rule.comment(what)!r} has no counter")
            if what == "dropped":
                limit = _limit_problem(expr, rule)
                if limit:
                    problems.append(f"{where}: rule {rule.comment(what)!r}: {limit}")
                if not any("drop" in e for e in expr):
                    problems.append(f"{where}: rule {rule.comment(what)!r} does not drop")
    return problems


def counter_rows(plan: FirewallPlan, listing: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``firewall.csv`` rows: per firewall and direction, the packets and bytes matched and dropped."""
    listed = listed_rules(listing)

    def counter(comment: str) -> tuple[int | str, int | str]:
        found = [e["counter"] for e in listed.get(comment, []) if "counter" in e]
        return (int(found[0].get("packets", 0)), int(found[0].get("bytes", 0))) if found else ("", "")

    rows = []
    for rule in plan.rules:
        m_pkts, m_bytes = counter(rule.comment("matched"))
        d_pkts, d_bytes = counter(rule.comment("dropped")) if rule.action in DROPPING else (0, 0)
        rows.append({"firewall": rule.firewall, "router": plan.router, "direction": rule.direction,
                     "proto": rule.proto, "port": rule.port, "action": rule.action,
                     "rate_bps": "" if rule.rate_bps is None else rule.rate_bps, "matched_pkts": m_pkts,
                     "matched_bytes": m_bytes, "dropped_pkts": d_pkts, "dropped_bytes": d_bytes})
    return rows
