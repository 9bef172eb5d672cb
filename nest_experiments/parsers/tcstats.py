"""Decoding of qdisc statistics as netlink delivers them (pure): a sample row from a qdisc's stats and xstats
(the messages themselves: :mod:`nest_experiments.net.netlink`)."""

from __future__ import annotations

import struct
from typing import Any

#: PIE's drop probability is a fraction of this (the kernel dumps prob << 8, a fraction of U64_MAX)
PIE_MAX_PROB = (1 << 64) - 1
_PIE_XSTATS = struct.Struct("=QIIIIIIII")  # prob, delay(us), avg_dq_rate, dq_rate_estimating, packets_in,
#                                          dropped, overlimit, maxq, ecn_mark


#: where each AQM's TCA_XSTATS holds its count of ECN-marked packets: (struct of the leading fields, index of
#: ecn_mark in it), from the kernel's tc_*_xstats in linux/pkt_sched.h. fq_codel's starts with a type word
#: (0: qdisc stats, 1: class stats) that must be 0; a kind not listed has no such counter ("" in the row).
_ECN_MARK: dict[str, tuple[struct.Struct, int]] = {
    "pie": (_PIE_XSTATS, 8),
    # packets_in, dropped, overlimit, overmemory, ecn_mark, new_flow_count, new_flows_len, old_flows_len, memory_usage
    "fq_pie": (struct.Struct("=9I"), 4),
    # maxpacket, count, lastcount, ldelay, drop_next(s32), drop_overlimit, ecn_mark, dropping, ce_mark
    "codel": (struct.Struct("=IIIIiIIII"), 6),
    # type, then (qdisc stats) maxpacket, drop_overlimit, ecn_mark, ...
    "fq_codel": (struct.Struct("=4I"), 3),
}


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


def ecn_marks(kind: str, raw: bytes | None) -> int | None:
    """Packets the AQM marked CE instead of dropping (cumulative), from its TCA_XSTATS; None when the kind has
    no such counter or the xstats are short (an older kernel's struct) or are class stats."""
    layout = _ECN_MARK.get(kind)
    if layout is None or raw is None or len(raw) < layout[0].size:
        return None
    fields = layout[0].unpack_from(raw)
    if kind == "fq_codel" and fields[0] != 0:
        return None
    return int(fields[layout[1]])


def qdisc_row(kind: str, stats: dict[str, Any], xstats: Any) -> dict[str, Any]:
    """One ``qdisc.csv`` row's counters from TCA_STATS (+ the AQMs' xstats: PIE's delay and probability, the ECN
    marks of every AQM that counts them)."""
    raw = xstats_bytes(xstats)
    delay_ms, prob = pie_xstats(raw) if kind == "pie" else (None, None)
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
