"""Bytes on the wire from a capture (pure): pcap bytes in, packet and byte counts per protocol out.

For the protocol-overhead measurement (the HTTP/2-QUIC evaluation): a capture
on an emulated link (:mod:`nest_experiments.collectors.wire`) records every
packet's *original* length even with a short snap length, so the counts
hold whole frames while the file holds only the headers.

Per frame (Ethernet, Linux cooked v1/v2 are read; what we count is the
frame as the pcap record's ``orig_len`` gives it, the Ethernet header's
14 bytes included, no preamble, FCS or inter-frame gap):

- ``frame_bytes``: the original length (for Ethernet: link header + IP
  packet). For the cooked link types, whose pseudo-header is not on any
  wire, the IP packet plus the 14 bytes an Ethernet header would have;
- ``ip_bytes``: the IP packet (IPv4 total length, IPv6 40 + payload length);
- ``l4_header_bytes``: the TCP header with its options (data offset) or
  UDP's 8 bytes;
- ``l4_payload_bytes``: what TCP or UDP carries: TLS records, QUIC packets
  (their headers, frames and AEAD tags), HTTP headers and framing, the media,
  retransmissions included.

Protocols: ``tcp``, ``udp`` (over IPv4 or IPv6 without extension headers),
``other`` (any other IP packet; non-IP frames are counted as ``other`` with
only their frame bytes). Fragments after the first carry no L4 header.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from nest_experiments.errors import ConfigError

PROTOCOLS = ("tcp", "udp", "other")
ETHERNET_HEADER = 14
LINKTYPE_ETHERNET = 1
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276
# link type -> (offset of the network header, offset of the ethertype or None)
_L2 = {LINKTYPE_ETHERNET: (14, 12), LINKTYPE_LINUX_SLL: (16, 14), LINKTYPE_LINUX_SLL2: (20, 0)}
_MAGIC = {b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
          b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9)}
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
IPPROTO_TCP = 6
IPPROTO_UDP = 17


@dataclass(frozen=True, kw_only=True)
class Frame:
    """One pcap record: its time, its original length and the bytes captured (at most the snap length)."""

    t: float
    orig_len: int
    data: bytes


@dataclass(frozen=True, kw_only=True)
class Counts:
    """Packets and bytes of one protocol (see the module's docstring for what each byte count holds)."""

    packets: int = 0
    frame_bytes: int = 0
    ip_bytes: int = 0
    l4_header_bytes: int = 0
    l4_payload_bytes: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(packets=self.packets + other.packets, frame_bytes=self.frame_bytes + other.frame_bytes,
                      ip_bytes=self.ip_bytes + other.ip_bytes,
                      l4_header_bytes=self.l4_header_bytes + other.l4_header_bytes,
                      l4_payload_bytes=self.l4_payload_bytes + other.l4_payload_bytes)


def read_pcap(data: bytes, *, where: str = "pcap") -> tuple[int, Iterator[Frame]]:
    """(link type, frames) of a classic pcap file's bytes; a record cut short at the end is left out."""
    if len(data) < 24 or data[:4] not in _MAGIC:
        raise ConfigError(where, "not a pcap file (pcapng is not read: capture with tcpdump -w)")
    endian, unit = _MAGIC[data[:4]]
    linktype = struct.unpack_from(f"{endian}I", data, 20)[0] & 0x0FFFFFFF
    return linktype, _records(data, endian, unit)


def _records(data: bytes, endian: str, unit: float) -> Iterator[Frame]:
    header = struct.Struct(f"{endian}IIII")
    pos = 24
    while pos + header.size <= len(data):
        sec, frac, incl, orig = header.unpack_from(data, pos)
        pos += header.size
        if pos + incl > len(data):
            return
        yield Frame(t=sec + frac * unit, orig_len=orig, data=data[pos:pos + incl])
        pos += incl


def classify(frame: Frame, linktype: int) -> tuple[str, Counts]:
    """The protocol of one frame and its counts (one packet)."""
    if linktype not in _L2:
        raise ConfigError("pcap", f"link type {linktype} is not read (Ethernet, Linux cooked v1/v2 are)")
    net, type_at = _L2[linktype]
    d = frame.data
    ethertype = struct.unpack_from("!H", d, type_at)[0] if len(d) >= type_at + 2 else 0
    link = frame.orig_len - net  # the IP packet's length as the record gives it
    wire = frame.orig_len if linktype == LINKTYPE_ETHERNET else link + ETHERNET_HEADER
    if ethertype == ETH_P_IP and len(d) >= net + 20:
        ihl = (d[net] & 0x0F) * 4
        ip_len = struct.unpack_from("!H", d, net + 2)[0]
        proto = d[net + 9]
        first = struct.unpack_from("!H", d, net + 6)[0] & 0x1FFF == 0
        return _l4(d, net + ihl, proto if first else -1, ip_len, ip_len - ihl, wire)
    if ethertype == ETH_P_IPV6 and len(d) >= net + 40:
        payload = struct.unpack_from("!H", d, net + 4)[0]
        return _l4(d, net + 40, d[net + 6], 40 + payload, payload, wire)
    return "other", Counts(packets=1, frame_bytes=wire)


def _l4(d: bytes, at: int, proto: int, ip_len: int, l4_len: int, wire: int) -> tuple[str, Counts]:
    if proto == IPPROTO_TCP and len(d) >= at + 13:
        hdr = (d[at + 12] >> 4) * 4
        return "tcp", Counts(packets=1, frame_bytes=wire, ip_bytes=ip_len, l4_header_bytes=hdr,
                             l4_payload_bytes=max(0, l4_len - hdr))
    if proto == IPPROTO_UDP:
        return "udp", Counts(packets=1, frame_bytes=wire, ip_bytes=ip_len, l4_header_bytes=8,
                             l4_payload_bytes=max(0, l4_len - 8))
    return "other", Counts(packets=1, frame_bytes=wire, ip_bytes=ip_len)


def account(frames: Iterable[Frame], linktype: int) -> dict[str, Counts]:
    """Counts per protocol (every key of :data:`PROTOCOLS`, zero where none)."""
    out = {p: Counts() for p in PROTOCOLS}
    for frame in frames:
        proto, counts = classify(frame, linktype)
        out[proto] = out[proto] + counts
    return out


def account_pcap(data: bytes, *, where: str = "pcap") -> dict[str, Counts]:
    linktype, frames = read_pcap(data, where=where)
    return account(frames, linktype)


def overhead(wire_bytes: float, payload_bytes: float) -> float:
    """Protocol overhead: bytes on the wire beyond the payload, as a fraction of the payload."""
    if payload_bytes <= 0:
        raise ValueError("no payload: the overhead is undefined")
    return (wire_bytes - payload_bytes) / payload_bytes
