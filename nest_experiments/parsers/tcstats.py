"""Decoding of qdisc statistics as netlink delivers them (pure): a sample row from a qdisc's stats and xstats
(the messages themselves: :mod:`nest_experiments.net.netlink`)."""

from __future__ import annotations

import struct
from typing import Any

#: PIE's drop probability is a fraction of this (the kernel dumps prob << 8, a fraction of U64_MAX)
PIE_MAX_PROB = (1 << 64) - 1
_PIE_XSTATS = struct.Struct("=QIIIIIIII")  # prob, delay(us), avg_dq_rate, dq_rate_estimating, packets_in,
#                                          dropped, overlimit, maxq, ecn_mark


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


def pie_xstats(raw: bytes | None) -> tuple[float | None, float | None]:
    """(delay in ms, drop probability 0..1) from PIE's TCA_XSTATS."""
    if raw is None or len(raw) < _PIE_XSTATS.size:
        return None, None
    prob, delay_us, *_ = _PIE_XSTATS.unpack_from(raw)
    return delay_us / 1000.0, prob / PIE_MAX_PROB


def qdisc_row(kind: str, stats: dict[str, Any], xstats: Any) -> dict[str, Any]:
    """One ``qdisc.csv`` row's counters from TCA_STATS (+ PIE's xstats)."""
    delay_ms, prob = pie_xstats(xstats_bytes(xstats)) if kind == "pie" else (None, None)
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
    }
