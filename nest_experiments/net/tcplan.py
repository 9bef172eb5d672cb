"""Traffic-control plans: an egress config in, ``tc`` argument lists out.

Nothing here runs anything. :mod:`nest_experiments.net` applies a plan with
the exit status checked and compares the kernel's view (``tc -j qdisc show``,
the HTB classes from a netlink dump) with :func:`expected`, so that a qdisc the
kernel silently did not install stops the run.

Layout of one egress (the AQM leaf is the only queue that builds up):

* rate only:        ``htb 1:`` -> class ``1:1`` (rate = ceil) -> leaf ``10:``
* delay/loss + rate: ``netem 1:`` (delay only, large limit) -> ``htb 2:`` ->
  class ``2:1`` -> leaf ``10:``; netem holds packets for the delay but never
  queues because of the rate, so the leaf is still the only bottleneck queue
* delay/loss only:  ``netem 1:`` (its own tfifo is the queue)
* qdisc only:       the qdisc at the root

Every parameter we set is read back: the leaf's from ``qdisc/kinds.toml``'s
``readback`` keys, netem's (limit, delay, jitter, loss) from the nested
objects iproute2 6.1 prints for it (:func:`_netem_readback`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nest_experiments.config import EgressConfig, QdiscConfig, qdisc_kinds
from nest_experiments.units import format_rate

NETEM_LIMIT = 100_000  # packets: the delay line must never be what drops


@dataclass(frozen=True, kw_only=True)
class ExpectedQdisc:
    kind: str
    handle: str
    parent: str  # "root" or "1:1"
    options: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, kw_only=True)
class EgressPlan:
    ns: str
    dev: str
    commands: tuple[tuple[str, ...], ...]
    qdiscs: tuple[ExpectedQdisc, ...]
    htb_rate_bps: int | None
    htb_class: str | None
    leaf_handle: str | None  # the AQM / FIFO the sampler watches
    htb_burst_bytes: int | None = None  # HTB's burst = cburst (None: tc's default, one MTU)


def qdisc_args(q: QdiscConfig) -> list[str]:
    spec = qdisc_kinds()[q.kind].params
    args = [q.kind]
    for name, value in q.params:
        p = spec[name]
        if p.type == "bool":
            flag = p.tc if value else p.no
            args += [flag] if flag else []
        elif p.type == "time":
            args += [p.tc, f"{round(value * 1e6)}us"]
        else:  # a choice with no keyword is its bare word (CAKE's "diffserv4")
            args += [p.tc, str(value)] if p.tc else [str(value)]
    return args


def _readback_options(q: QdiscConfig) -> tuple[tuple[str, Any], ...]:
    spec = qdisc_kinds()[q.kind].params
    return tuple((spec[name].readback, round(value * 1e6) if spec[name].type == "time" else value)
                 for name, value in q.params)


def netem_args(e: EgressConfig) -> list[str]:
    args = ["netem", "limit", str(NETEM_LIMIT)]
    if e.delay_s or e.jitter_s:
        args += ["delay", f"{round(e.delay_s * 1e6)}us"]
        if e.jitter_s:
            args += [f"{round(e.jitter_s * 1e6)}us"]
    if e.loss_pct:
        args += ["loss", f"{e.loss_pct:g}%"]
    return args


def _netem_options(e: EgressConfig) -> tuple[tuple[str, Any], ...]:
    """What :func:`netem_args` sets, in :func:`_netem_readback`'s keys and units: limit (packets), delay and
    jitter (us), loss (percent). The jitter only where tc is given one (with a delay): without a delay iproute2
    prints no jitter, so a jitter set without a delay is one that cannot be read back."""
    options: list[tuple[str, Any]] = [("limit", NETEM_LIMIT), ("delay", round(e.delay_s * 1e6))]
    if e.delay_s or e.jitter_s:
        options.append(("jitter", round(e.jitter_s * 1e6)))
    options.append(("loss", float(e.loss_pct)))
    return tuple(options)


@dataclass(frozen=True, kw_only=True)
class Egress:
    """A configured egress, for samplers: node, interface, namespace, plan."""

    link: str
    node: str
    peer: str
    dev: str
    ns: str
    plan: EgressPlan
    routed: bool = False  # the plan is in the router guest, on its NIC ``plan.dev`` (net.routed)


def plan_egress(ns: str, dev: str, e: EgressConfig, *, htb_burst_bytes: int | None = None) -> EgressPlan:
    tc = ["tc", "-n", ns]
    cmds: list[list[str]] = [tc + ["qdisc", "del", "dev", dev, "root"]]  # may fail: nothing there yet
    qdiscs: list[ExpectedQdisc] = []
    parent, top = ["root"], "root"
    if e.needs_netem:
        cmds.append(tc + ["qdisc", "add", "dev", dev, "root", "handle", "1:"] + netem_args(e))
        qdiscs.append(ExpectedQdisc(kind="netem", handle="1:", parent="root", options=_netem_options(e)))
        parent, top = ["parent", "1:1"], "1:1"
    htb_class = None
    if e.rate_bps is not None:
        h = "2:" if e.needs_netem else "1:"
        htb_class = f"{h}1"
        rate = format_rate(e.rate_bps)
        cmds.append(tc + ["qdisc", "add", "dev", dev] + parent + ["handle", h, "htb", "default", "1"])
        burst = ["burst", str(htb_burst_bytes), "cburst", str(htb_burst_bytes)] if htb_burst_bytes else []
        cmds.append(tc + ["class", "add", "dev", dev, "parent", h, "classid", htb_class, "htb", "rate", rate, "ceil", rate,
                          *burst])
        qdiscs.append(ExpectedQdisc(kind="htb", handle=h, parent=top))
        parent, top = ["parent", htb_class], htb_class
    leaf = None
    if e.qdisc is not None:
        leaf = "10:"
        cmds.append(tc + ["qdisc", "add", "dev", dev] + parent + ["handle", leaf] + qdisc_args(e.qdisc))
        qdiscs.append(ExpectedQdisc(kind=e.qdisc.kind, handle=leaf, parent=top, options=_readback_options(e.qdisc)))
    elif e.needs_netem and e.rate_bps is None:
        leaf = "1:"
    return EgressPlan(ns=ns, dev=dev, commands=tuple(tuple(c) for c in cmds), qdiscs=tuple(qdiscs),
                      htb_rate_bps=e.rate_bps, htb_class=htb_class, leaf_handle=leaf, htb_burst_bytes=htb_burst_bytes)


# ---------------------------------------------------------------- read-back (pure)


def compare_qdiscs(plan: EgressPlan, shown: list[dict[str, Any]]) -> list[str]:
    """Differences between the plan and ``tc -j qdisc show dev X`` output."""
    problems = []
    for want in plan.qdiscs:
        got = next((q for q in shown if q.get("handle") == want.handle), None)
        where = f"{plan.ns}/{plan.dev} {want.handle}"
        if got is None or got.get("kind") != want.kind:
            found = got.get("kind") if got else "nothing"
            problems.append(f"{where}: expected qdisc {want.kind}, kernel has {found}")
            continue
        parent = "root" if got.get("root") else got.get("parent")
        if parent != want.parent:
            problems.append(f"{where}: {want.kind} under {parent}, expected under {want.parent}")
        options = got.get("options", {})
        readback = _READBACK.get(want.kind)
        problems += _compare_options(where, want, readback(options) if readback else options)
    return problems


def _netem_readback(options: dict[str, Any]) -> dict[str, Any]:
    """netem's options as iproute2 6.1 prints them (``tc/q_netem.c``, ``netem_print_opt``), in the keys and units
    of :func:`_netem_options`.

    tc prints ``"limit"`` (packets) always; ``"delay": {"delay": s, "jitter": s, "correlation": 0..1}`` only when
    the kernel's latency is non-zero (a jitter without a delay is then not printed at all: it stays unreported);
    ``"loss-random": {"loss": 0..1, "correlation": 0..1}`` only when the loss is non-zero. So, with ``"limit"``
    there, an absent object is a delay or loss of 0; without it tc printed no netem options and nothing is
    inferred (every key unreported). Seconds (``%g``: 6 significant digits) -> microseconds, fraction -> percent.
    """
    if "limit" not in options:
        return {}
    out: dict[str, Any] = {"limit": options["limit"]}
    delay = options.get("delay", {"delay": 0})
    loss = options.get("loss-random", {"loss": 0})
    for key in ("delay", "jitter"):
        if isinstance(delay, dict) and isinstance(delay.get(key), (int, float)):
            out[key] = round(delay[key] * 1e6)
    if isinstance(loss, dict) and isinstance(loss.get("loss"), (int, float)):
        out["loss"] = loss["loss"] * 100
    return out


# kinds whose `tc -j` options are not flat: their read-back into the plan's keys
_READBACK: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"netem": _netem_readback}


def _compare_options(where: str, want: ExpectedQdisc, options: dict[str, Any]) -> list[str]:
    """Every option we set against ``tc -j``'s; a key tc did not report is named, never skipped.

    A flag reads back from its key's presence: iproute2 6.1 prints ``"ecn": true``
    only when the kernel's attribute is non-zero, and the kernel always dumps it
    for pie, fq_pie, codel and fq_codel, so an absent key is a flag that is off.
    """
    problems, unreported = [], []
    for key, value in want.options:
        if isinstance(value, bool):
            got_flag = bool(options.get(key, False))
            if got_flag != value:
                problems.append(f"{where}: {want.kind} {key} is {_on_off(got_flag)}, expected {_on_off(value)}")
            continue
        got = options.get(key)
        if got is None:
            unreported.append(key)
        elif not _same(value, got):
            problems.append(f"{where}: {want.kind} {key} is {_show(got)}, expected {_show(value)}")
    if unreported:
        problems.append(f"{where}: {want.kind} {', '.join(unreported)} cannot be read back: "
                        "`tc -j qdisc show` does not report them (iproute2 too old for this qdisc?)")
    return problems


def _same(value: Any, got: Any) -> bool:
    if isinstance(value, int) and isinstance(got, (int, float)):
        return abs(got - value) <= max(1, 0.02 * abs(value))  # kernels round times to their tick
    if isinstance(value, float) and isinstance(got, (int, float)):
        # netem's loss: a u32 share of 2**32 - 1, printed with %g (6 significant digits), read back in percent
        return math.isclose(got, value, rel_tol=1e-5, abs_tol=1e-7)
    return bool(got == value)


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _on_off(flag: bool) -> str:
    return "on" if flag else "off"


_CLASS_RE = re.compile(r"class htb (?P<id>\S+) .*?\brate (?P<rate>\d+(?:\.\d+)?)(?P<unit>[KMG]?)bit\b")
_MULT = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}


def parse_htb_classes(text: str) -> dict[str, int]:
    """``tc class show`` text -> {classid: rate in bit/s} (iproute2 6.1 ignores -j here)."""
    out = {}
    for m in _CLASS_RE.finditer(text):
        out[m.group("id")] = int(round(float(m.group("rate")) * _MULT[m.group("unit")]))
    return out


def compare_rate(plan: EgressPlan, classes: dict[str, int]) -> list[str]:
    if plan.htb_class is None or plan.htb_rate_bps is None:
        return []
    got = classes.get(plan.htb_class)
    want = plan.htb_rate_bps
    if got is None or abs(got - want) > 0.01 * want:
        return [f"{plan.ns}/{plan.dev} class {plan.htb_class}: rate {got} bit/s, expected {want}"]
    return []
