"""Decoding of qdisc statistics as netlink delivers them (pure): a sample row from a qdisc's stats and xstats
(the messages themselves: :mod:`nest_experiments.net.netlink`)."""

from __future__ import annotations

import struct
import tomllib
from dataclasses import dataclass
from functools import cache
from typing import Any

from nest_experiments import resources

#: PIE's drop probability is a fraction of this (the kernel dumps prob << 8, a fraction of U64_MAX)
PIE_MAX_PROB = (1 << 64) - 1


@dataclass(frozen=True)
class XStats:
    """Where a kind's TCA_XSTATS (the kernel's tc_*_xstats, linux/pkt_sched.h) hold what a row reads: its
    ``xstats`` table in ``qdisc/kinds.toml``."""

    layout: struct.Struct  # the leading fields
    ecn_mark: int | None = None  # packets CE-marked instead of dropped (cumulative)
    delay_us: int | None = None  # the queue delay the AQM sees, microseconds
    prob: int | None = None  # PIE's drop probability (a fraction of PIE_MAX_PROB)
    type_word: int | None = None  # a union's type word: 0 for qdisc stats (else class stats: nothing read)


def xstats_from(tables: dict[str, Any]) -> dict[str, XStats]:
    """Per kind, its :class:`XStats` from the ``xstats`` tables of a parsed kinds file (kinds without one: none)."""
    out = {}
    for kind, t in tables.items():
        x = t.get("xstats")
        if x:
            out[kind] = XStats(struct.Struct(x["format"]), **{k: int(v) for k, v in x.items() if k != "format"})
    return out


@cache
def xstats_layouts() -> dict[str, XStats]:
    """:func:`xstats_from` of the shipped ``qdisc/kinds.toml`` (read here, not through the config: the router
    guest's agent decodes its rows with this module alone)."""
    with resources.data(resources.QDISC_KINDS).open("rb") as fh:
        return xstats_from(tomllib.load(fh))


def _fields(kind: str, raw: bytes | None) -> tuple[XStats, tuple[Any, ...]] | None:
    x = xstats_layouts().get(kind)
    if x is None or raw is None or len(raw) < x.layout.size:
        return None
    fields = x.layout.unpack_from(raw)
    if x.type_word is not None and fields[x.type_word] != 0:
        return None
    return x, fields


def delay_and_prob(raw: bytes | None, kind: str = "pie") -> tuple[float | None, float | None]:
    """(delay in ms, drop probability 0..1) from an AQM's TCA_XSTATS, each None where the kind reports none."""
    found = _fields(kind, raw)
    if found is None:
        return None, None
    x, fields = found
    return (None if x.delay_us is None else fields[x.delay_us] / 1000.0,
            None if x.prob is None else fields[x.prob] / PIE_MAX_PROB)


def ecn_marks(kind: str, raw: bytes | None) -> int | None:
    """Packets the AQM marked CE instead of dropping (cumulative), from its TCA_XSTATS; None when the kind has
    no such counter or the xstats are short (an older kernel's struct) or are class stats."""
    found = _fields(kind, raw)
    if found is None or found[0].ecn_mark is None:
        return None
    return int(found[1][found[0].ecn_mark])


def xstats_bytes(value: Any) -> bytes | None:
    """pyroute2 hands unknown xstats over as bytes or as a 'aa:bb:..' hex string."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return bytes.fromhex(value.replace(":", ""))
    if isinstance(value, dict) and "value" in value:
        return xstats_bytes(value["value"])
    return None


def qdisc_row(kind: str, stats: dict[str, Any], xstats: Any) -> dict[str, Any]:
    """One ``qdisc.csv`` row's counters from TCA_STATS (+ the AQMs' xstats, as the kind's ``xstats`` table says:
    the delay (PIE, CoDel), PIE's probability, the ECN marks of every AQM that counts them)."""
    raw = xstats_bytes(xstats)
    delay_ms, prob = delay_and_prob(raw, kind)
    marks = ecn_marks(kind, raw)
    return {
        "kind": kind,
        "backlog_bytes": stats.get("backlog", 0),
        "backlog_pkts": stats.get("qlen", 0),
        "drops": stats.get("drop", 0),
        "overlimits": stats.get("overlimits", 0),
        "sent_pkts": stats.get("packets", 0),
        "sent_bytes": stats.get("bytes", 0),
        "delay_ms": "" if delay_ms is None else round(delay_ms, 3),
        "prob": "" if prob is None else f"{prob:.6g}",
        "ecn_marks": "" if marks is None else marks,
    }
