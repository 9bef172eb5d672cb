"""The qdisc sampler's netlink encoding and decoding, on hand-assembled messages (layouts from linux/rtnetlink.h)."""

from __future__ import annotations

import struct

import pytest

from nest_experiments.net.netlink import (
    NetlinkError,
    netlink_error,
    netlink_messages,
    qdisc_dump_request,
    qdisc_message,
)
from nest_experiments.parsers.tcstats import qdisc_row


def nla(kind: int, value: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(value), kind) + value
    return raw + b"\0" * (-len(raw) % 4)


def nlmsg(kind: int, seq: int, payload: bytes) -> bytes:
    raw = struct.pack("=IHHII", 16 + len(payload), kind, 0x2, seq, 4242) + payload
    return raw + b"\0" * (-len(raw) % 4)


def pie_qdisc(index: int = 3, delay_us: int = 5460) -> bytes:
    tcmsg = struct.pack("=BBHiIII", 0, 0, 0, index, 0x100000, 0x10001, 1)
    stats = struct.pack("=QIIIIIII", 1_234_567, 890, 12, 34, 0, 0, 7, 9_000) + b"\0" * 4  # the kernel pads to 40
    xstats = struct.pack("=QIIIIIIII", (1 << 63) >> 8 << 8, delay_us, 0, 0, 900, 12, 0, 40, 0)
    return tcmsg + nla(1, b"pie\0") + nla(2 | 0x8000, b"\0" * 8) + nla(3, stats) + nla(4, xstats)


def test_dump_request_layout() -> None:
    raw = qdisc_dump_request(7, seq=99)
    length, kind, flags, seq, port = struct.unpack_from("=IHHII", raw)
    assert (length, kind, flags, seq, port) == (len(raw), 38, 0x301, 99, 0) and len(raw) == 36
    assert struct.unpack_from("=BBHiIII", raw, 16)[3] == 7


def test_pie_message_decodes_to_a_row() -> None:
    msg = qdisc_message(pie_qdisc())
    assert (msg.index, msg.handle, msg.parent, msg.kind) == (3, 0x100000, 0x10001, "pie")
    row = qdisc_row(msg.kind, msg.stats, msg.xstats)
    assert (row["sent_bytes"], row["sent_pkts"], row["drops"], row["overlimits"]) == (1_234_567, 890, 12, 34)
    assert (row["backlog_pkts"], row["backlog_bytes"], row["delay_ms"]) == (7, 9_000, 5.46)
    assert float(row["prob"]) == pytest.approx(0.5, rel=1e-6)


def test_messages_are_split_on_their_padded_lengths() -> None:
    data = nlmsg(36, 5, pie_qdisc(index=3)) + nlmsg(36, 5, pie_qdisc(index=4)) + nlmsg(3, 5, b"\0" * 4)
    msgs = list(netlink_messages(data))
    assert [(k, s) for k, s, _ in msgs] == [(36, 5), (36, 5), (3, 5)]
    assert [qdisc_message(p).index for _, _, p in msgs[:2]] == [3, 4]


def test_errors_and_truncation() -> None:
    assert netlink_error(struct.pack("=i", -22) + b"\0" * 16) == -22
    assert netlink_error(struct.pack("=i", 0)) == 0
    with pytest.raises(NetlinkError):
        list(netlink_messages(nlmsg(36, 1, pie_qdisc())[:-8]))  # the header says more than arrived
    with pytest.raises(NetlinkError):
        qdisc_message(pie_qdisc()[:-3])  # the last attribute cut short
    with pytest.raises(NetlinkError):
        qdisc_message(b"\0" * 10)
