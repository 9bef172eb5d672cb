"""Decoding of qdisc statistics as netlink delivers them (pure)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
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


# --- qdisc dumps straight from a netlink socket (the sampler's hot path in the TCG guest: pyroute2's generic
# decoder took ~50-130 ms of guest CPU per egress and sample; this reads only what qdisc_row needs) ---

NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
TCA_KIND, TCA_STATS, TCA_XSTATS = 1, 3, 4
_NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_TCMSG = struct.Struct("=BBHiIII")  # family, pad, pad, ifindex, handle, parent, info
_NLA = struct.Struct("=HH")  # length, type
_TC_STATS = struct.Struct("=QIIIIIII")  # struct tc_stats: bytes, packets, drops, overlimits, bps, pps, qlen, backlog
_TC_STATS_KEYS = ("bytes", "packets", "drop", "overlimits", "bps", "pps", "qlen", "backlog")  # pyroute2's names


class NetlinkError(ValueError):
    """A netlink reply that cannot be decoded, or an error the kernel sent back."""


@dataclass(frozen=True)
class QdiscMessage:
    index: int
    handle: int
    parent: int
    kind: str
    stats: dict[str, int]
    xstats: bytes | None


def qdisc_dump_request(index: int, seq: int) -> bytes:
    """RTM_GETQDISC dump request for the qdiscs of interface ``index``."""
    body = _TCMSG.pack(0, 0, 0, index, 0, 0, 0)
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def netlink_messages(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(type, sequence, payload) of each message in one ``recv``'s worth of netlink data."""
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind, _flags, seq, _port = _NLMSGHDR.unpack_from(data, offset)
        if length < _NLMSGHDR.size or offset + length > len(data):
            raise NetlinkError(f"netlink message of length {length} at offset {offset} of {len(data)} bytes")
        yield kind, seq, data[offset + _NLMSGHDR.size:offset + length]
        offset += (length + 3) & ~3


def netlink_error(payload: bytes) -> int:
    """The (negative errno, or 0 for an ack) code of an NLMSG_ERROR payload."""
    if len(payload) < 4:
        raise NetlinkError("truncated NLMSG_ERROR")
    (code,) = struct.unpack_from("=i", payload)
    return int(code)


def qdisc_message(payload: bytes) -> QdiscMessage:
    """An RTM_NEWQDISC payload: the tcmsg header and the attributes ``qdisc_row`` needs."""
    if len(payload) < _TCMSG.size:
        raise NetlinkError("truncated tcmsg")
    _, _, _, index, handle, parent, _ = _TCMSG.unpack_from(payload)
    kind, stats, xstats = "", {}, None
    offset = _TCMSG.size
    while offset + _NLA.size <= len(payload):
        length, attr = _NLA.unpack_from(payload, offset)
        if length < _NLA.size or offset + length > len(payload):
            raise NetlinkError(f"netlink attribute of length {length} at offset {offset} of {len(payload)} bytes")
        value = payload[offset + _NLA.size:offset + length]
        attr &= 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER
        if attr == TCA_KIND:
            kind = value.split(b"\0", 1)[0].decode("ascii", "replace")
        elif attr == TCA_STATS and len(value) >= _TC_STATS.size:
            stats = dict(zip(_TC_STATS_KEYS, _TC_STATS.unpack_from(value), strict=True))
        elif attr == TCA_XSTATS:
            xstats = value
        offset += (length + 3) & ~3
    return QdiscMessage(index=index, handle=handle, parent=parent, kind=kind, stats=stats, xstats=xstats)
