"""Bytes on the wire from a pcap (nest_experiments.analysis.wire_bytes), on a pcap of known packets written here with struct."""

from __future__ import annotations

import struct

import pytest

from nest_experiments.analysis import wire_bytes as wire
from nest_experiments.errors import ConfigError

SNAPLEN = 96
MAC = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02"


def ipv4(proto: int, l4: bytes, *, frag: int = 0) -> bytes:
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 1, frag, 64, proto, 0, bytes([10, 0, 0, 1]),
                       bytes([10, 0, 1, 1])) + l4


def tcp(payload: int, *, options: int = 12) -> bytes:
    doff = (20 + options) // 4
    return struct.pack("!HHIIBBHHH", 443, 50000, 1, 1, doff << 4, 0x18, 65535, 0, 0) + b"\x01" * options \
        + b"\xaa" * payload


def udp(payload: int) -> bytes:
    return struct.pack("!HHHH", 443, 50000, 8 + payload, 0) + b"\xbb" * payload


def ether(ethertype: int, body: bytes) -> bytes:
    return MAC + struct.pack("!H", ethertype) + body


def pcap(frames: list[bytes], *, nano: bool = False, snaplen: int = SNAPLEN, cut_last: bool = False) -> bytes:
    """A classic little-endian pcap, each frame captured up to ``snaplen`` with its original length."""
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, wire.LINKTYPE_ETHERNET)
    for i, f in enumerate(frames):
        kept = f[:snaplen]
        out += struct.pack("<IIII", 1000 + i, 500, len(kept), len(f)) + kept
    return out[:-5] if cut_last else out


TCP_DATA = ether(0x0800, ipv4(6, tcp(1448)))  # 14 + 20 + 32 + 1448 = 1514
TCP_ACK = ether(0x0800, ipv4(6, tcp(0)))  # 66
UDP_QUIC = ether(0x0800, ipv4(17, udp(1252)))  # 14 + 20 + 8 + 1252 = 1294
ARP = ether(0x0806, b"\x00" * 28)  # 42
IPV6_UDP = ether(0x86DD, struct.pack("!IHBB16s16s", 6 << 28, 8 + 100, 17, 64, b"\x00" * 16, b"\x00" * 16) + udp(100))


def test_counts_whole_frames_from_records_cut_to_the_snap_length() -> None:
    assert (len(TCP_DATA), len(TCP_ACK), len(UDP_QUIC), len(ARP)) == (1514, 66, 1294, 42)
    counts = wire.account_pcap(pcap([TCP_DATA, TCP_DATA, TCP_ACK, UDP_QUIC, ARP, IPV6_UDP]))
    assert counts["tcp"] == wire.Counts(packets=3, frame_bytes=2 * 1514 + 66, ip_bytes=2 * 1500 + 52,
                                        l4_header_bytes=3 * 32, l4_payload_bytes=2 * 1448)
    assert counts["udp"] == wire.Counts(packets=2, frame_bytes=1294 + 14 + 40 + 108, ip_bytes=1280 + 148,
                                        l4_header_bytes=16, l4_payload_bytes=1252 + 100)
    assert counts["other"] == wire.Counts(packets=1, frame_bytes=42)


def test_nanosecond_pcap_times_and_a_record_cut_short_at_the_end() -> None:
    linktype, frames = wire.read_pcap(pcap([TCP_ACK, UDP_QUIC], nano=True))
    got = list(frames)
    assert linktype == wire.LINKTYPE_ETHERNET and [f.orig_len for f in got] == [66, 1294]
    assert got[0].t == pytest.approx(1000 + 500e-9)
    _, frames = wire.read_pcap(pcap([TCP_ACK, UDP_QUIC], cut_last=True))
    assert [f.orig_len for f in frames] == [66]  # tcpdump stopped mid-record: the partial one is not counted


def test_a_later_fragment_has_no_transport_header() -> None:
    frag = ether(0x0800, ipv4(17, b"\xcc" * 600, frag=185))  # offset 1480 bytes
    counts = wire.account_pcap(pcap([frag]))
    assert counts["other"] == wire.Counts(packets=1, frame_bytes=634, ip_bytes=620)


def test_cooked_capture_counts_an_ethernet_header_instead_of_its_pseudo_header() -> None:
    body = ipv4(17, udp(1252))
    sll = struct.pack("!HHH8sH", 4, 1, 6, b"\x00" * 8, 0x0800) + body  # LINUX_SLL: 16-byte pseudo-header
    data = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 96, wire.LINKTYPE_LINUX_SLL)
    data += struct.pack("<IIII", 1, 0, 96, len(sll)) + sll[:96]
    assert wire.account_pcap(data)["udp"].frame_bytes == 1294


def test_overhead_is_the_wire_beyond_the_payload_over_the_payload() -> None:
    assert wire.overhead(1050, 1000) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        wire.overhead(10, 0)


def test_not_a_pcap_names_the_file() -> None:
    with pytest.raises(ConfigError, match="x.pcap: not a pcap file"):
        wire.account_pcap(b"\x0a\x0d\x0d\x0a" + b"\x00" * 40, where="x.pcap")
