"""Netlink messages of the run's traffic control (pure): the framing, the qdisc dump the sampler sends and
reads (its hot path in the TCG guest: pyroute2's generic decoder took ~50-130 ms of guest CPU per egress and
sample; this reads only what a sample row needs), and HTB classes.

HTB: what ``tc class change dev D parent 1: classid 1:1 htb rate R ceil R`` sends,
built without a process (a process costs ~0.3 s in the TCG guest; a trace
changes the rate up to 10 times a second): RTM_NEWTCLASS with the class's
``tc_htb_opt``. Like tc, the burst is one 1600-byte MTU's worth of time at
the rate; the link layer is Ethernet, so the kernel needs no rate table; the
quantum is the one the kernel would derive (rate / r2q 10, within
1000-200000 bytes), given explicitly so that the kernel does not warn about
a small quantum at every change of a slow trace. The sockets: :mod:`.rtnl`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

RTM_NEWTCLASS, RTM_GETTCLASS = 40, 42
NLM_F_ACK = 0x4
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_HTB_PARMS, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 1, 6, 7
TC_LINKLAYER_ETHERNET = 1
MTU = 1600  # tc's default for the burst
R2Q = 10  # the HTB qdisc's default rate-to-quantum divisor (tc qdisc add ... htb without r2q)
TICKS_PER_US = 1000 / 64  # psched ticks are 64 ns (/proc/net/psched on every kernel since 2.6.31)

_NLMSGHDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_TCMSG = struct.Struct("=BBHiIII")  # family, pad, pad, ifindex, handle, parent, info
_NLA = struct.Struct("=HH")  # length, type
_RATESPEC = struct.Struct("=BBHhHI")  # cell_log, linklayer, overhead, cell_align, mpu, rate (bytes/s)
_HTB_OPT = struct.Struct("=12s12sIIIII")  # rate, ceil, buffer, cbuffer, quantum, level, prio


# ---------------------------------------------------------------- framing and qdisc dumps

NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
TCA_STATS, TCA_XSTATS = 3, 4
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


# ---------------------------------------------------------------- HTB classes


def parse_handle(text: str) -> int:
    """``"1:1"`` -> 0x00010001, ``"2:"`` -> 0x00020000 (tc's hexadecimal major:minor)."""
    major, _, minor = text.partition(":")
    return (int(major, 16) << 16) | (int(minor, 16) if minor else 0)


def format_handle(handle: int) -> str:
    """0x00010001 -> ``"1:1"``, 0x00020000 -> ``"2:"`` (as tc prints a class id or a qdisc handle)."""
    major, minor = handle >> 16, handle & 0xFFFF
    return f"{major:x}:{minor:x}" if minor else f"{major:x}:"


def _attr(kind: int, value: bytes) -> bytes:
    length = _NLA.size + len(value)
    return _NLA.pack(length, kind) + value + b"\0" * (-length % 4)


def burst_ticks(rate_bytes: int, burst_bytes: int | None = None) -> int:
    """A burst's time at a rate in psched ticks (as tc rounds it); tc's default burst is one MTU."""
    usec = int(1e6 * (burst_bytes or MTU) / rate_bytes)
    return min(int(usec * TICKS_PER_US), 0xFFFFFFFF)


def quantum(rate_bytes: int) -> int:
    return min(max(rate_bytes // R2Q, 1000), 200_000)


def change_request(*, index: int, classid: str, parent: str, rate_bps: int, seq: int,
                   burst_bytes: int | None = None) -> bytes:
    """RTM_NEWTCLASS (change, ack requested): rate = ceil = ``rate_bps`` (rounded down to whole bytes/s), burst =
    cburst = ``burst_bytes`` (default: tc's, one MTU)."""
    rate_bytes = rate_bps // 8
    if rate_bytes < 1:
        raise ValueError(f"HTB needs at least 8 bit/s, got {rate_bps}")
    spec = _RATESPEC.pack(0, TC_LINKLAYER_ETHERNET, 0, 0, 0, min(rate_bytes, 0xFFFFFFFF))
    ticks = burst_ticks(rate_bytes, burst_bytes)
    options = _attr(TCA_HTB_PARMS, _HTB_OPT.pack(spec, spec, ticks, ticks, quantum(rate_bytes), 0, 0))
    if rate_bytes >= 1 << 32:
        options += _attr(TCA_HTB_RATE64, struct.pack("=Q", rate_bytes)) + _attr(TCA_HTB_CEIL64, struct.pack("=Q", rate_bytes))
    body = _TCMSG.pack(0, 0, 0, index, parse_handle(classid), parse_handle(parent), 0)
    body += _attr(TCA_KIND, b"htb\0") + _attr(TCA_OPTIONS, options)
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_NEWTCLASS, NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body


def dump_request(*, index: int, seq: int) -> bytes:
    """RTM_GETTCLASS dump of the classes of interface ``index``."""
    body = _TCMSG.pack(0, 0, 0, index, 0, 0, 0)
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_GETTCLASS, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


@dataclass(frozen=True)
class HtbClass:
    index: int
    classid: int
    rate_bps: int
    ceil_bps: int
    buffer_ticks: int
    cbuffer_ticks: int
    quantum: int


def _attrs(data: bytes, offset: int = 0) -> dict[int, bytes]:
    out = {}
    while offset + _NLA.size <= len(data):
        length, kind = _NLA.unpack_from(data, offset)
        if length < _NLA.size or offset + length > len(data):
            raise NetlinkError(f"netlink attribute of length {length} at offset {offset} of {len(data)} bytes")
        out[kind & 0x3FFF] = data[offset + _NLA.size:offset + length]
        offset += (length + 3) & ~3
    return out


def htb_class(payload: bytes) -> HtbClass | None:
    """An RTM_NEWTCLASS payload -> its HTB parameters (None for a class of another kind)."""
    if len(payload) < _TCMSG.size:
        raise NetlinkError("truncated tcmsg")
    _, _, _, index, handle, _, _ = _TCMSG.unpack_from(payload)
    attrs = _attrs(payload, _TCMSG.size)
    if attrs.get(TCA_KIND, b"").split(b"\0", 1)[0] != b"htb" or TCA_OPTIONS not in attrs:
        return None
    options = _attrs(attrs[TCA_OPTIONS])
    if len(options.get(TCA_HTB_PARMS, b"")) < _HTB_OPT.size:
        raise NetlinkError("HTB class without TCA_HTB_PARMS")
    rate, ceil, buffer, cbuffer, quantum_, _, _ = _HTB_OPT.unpack_from(options[TCA_HTB_PARMS])
    rate_bytes = _RATESPEC.unpack(rate)[-1]
    ceil_bytes = _RATESPEC.unpack(ceil)[-1]
    if TCA_HTB_RATE64 in options:
        (rate_bytes,) = struct.unpack_from("=Q", options[TCA_HTB_RATE64])
    if TCA_HTB_CEIL64 in options:
        (ceil_bytes,) = struct.unpack_from("=Q", options[TCA_HTB_CEIL64])
    return HtbClass(index=index, classid=handle, rate_bps=rate_bytes * 8, ceil_bps=ceil_bytes * 8,
                    buffer_ticks=buffer, cbuffer_ticks=cbuffer, quantum=quantum_)
