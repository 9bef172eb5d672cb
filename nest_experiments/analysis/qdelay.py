"""Queue delay through a router from captures on its ingress and egress interfaces (pure).

The kernel's FQ-PIE reports no delay, so we measure it (DESIGN §2b): every
IPv4 packet seen leaving the measured egress is matched to the same packet
seen arriving on one of the router's other interfaces, by the header fields
forwarding does not change — (src, dst, IP ID, protocol, ports, TCP seq);
TTL, checksum and the ECN bits (an AQM may mark them) are left out. The
sojourn time ``t_out - t_in`` is the time through the router: the qdisc's
queue plus forwarding (6-10 us, DESIGN §2b).

Two means, and they differ (state which one you report):

- **per packet**: the mean of every matched packet's sojourn time (what a
  packet experiences; weighted by packets, so bursts count more);
- **PIE's way**: what PIE's own ``delay`` statistic would read at a time t —
  the sojourn of the last packet dequeued before t, or 0 when the queue was
  empty after it (kernel ``pie_process_dequeue`` with the default timestamp
  estimator) — sampled at the same instants as the qdisc sampler.

Duplicates: a key can occur twice (IP ID wraps at 65536; a retransmission
normally gets a new IP ID); an egress packet is matched to the most recent
unmatched ingress packet with its key seen before it. Ingress packets never
matched, of flows seen on the egress, are the packets the router dropped
(the qdisc's ``drops``); ingress packets of other flows went elsewhere.

Packets are records ``(t, key, flow)``: ``t`` in seconds on any one clock,
``key`` the matching bytes, ``flow`` (src, dst, protocol) bytes. Frames in,
records out (:func:`frame_record`); records in, matches out
(:func:`match_packets`); no files, no processes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

METHOD_PER_PACKET = "capture-per-packet"
METHOD_PIE_STYLE = "capture-pie-style"

# link-layer types (pcap LINKTYPE_*): offset of the IP header and of the ethertype
LINKTYPE_ETHERNET = 1
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276
_L2 = {LINKTYPE_ETHERNET: (14, 12), LINKTYPE_LINUX_SLL: (16, 14), LINKTYPE_LINUX_SLL2: (20, 0)}
ETH_P_IP = b"\x08\x00"
IPPROTO_TCP = 6
IPPROTO_UDP = 17

Record = tuple[float, bytes, bytes]  # (t, key, flow)


def supported_linktype(linktype: int) -> bool:
    return linktype in _L2


def frame_record(t: float, frame: bytes, linktype: int) -> Record | None:
    """The matching record of one captured frame; None for anything but IPv4.

    The key is raw header bytes: IP ID, protocol, src, dst and, for the first
    fragment of TCP (UDP), ports + sequence number (ports). The capture's
    snap length must cover them (96 bytes does with any IP options).
    """
    ip, proto_at = _L2[linktype]
    if frame[proto_at:proto_at + 2] != ETH_P_IP or len(frame) < ip + 20 or frame[ip] >> 4 != 4:
        return None
    ihl = (frame[ip] & 0x0F) * 4
    proto = frame[ip + 9]
    first_fragment = (frame[ip + 6] & 0x1F) == 0 and frame[ip + 7] == 0
    l4 = 8 if proto == IPPROTO_TCP else 4 if proto == IPPROTO_UDP else 0
    l4_bytes = frame[ip + ihl:ip + ihl + l4] if first_fragment else b""
    flow = frame[ip + 9:ip + 10] + frame[ip + 12:ip + 20]
    return t, frame[ip + 4:ip + 6] + flow + l4_bytes, flow


@dataclass
class Matches:
    """Result of :func:`match_packets`; ``t_out``/``t_in`` are the matched pairs in egress order."""

    t_out: list[float] = field(default_factory=list)
    t_in: list[float] = field(default_factory=list)
    egress_packets: int = 0
    ingress_packets: int = 0  # of flows seen on the egress
    unmatched_egress: int = 0  # left without being seen arriving (router's own, or a capture loss)
    unmatched_ingress: int = 0  # of flows seen on the egress: dropped in the router
    other_ingress: int = 0  # of flows never seen on the egress: routed elsewhere

    @property
    def matched(self) -> int:
        return len(self.t_out)

    @property
    def matched_fraction(self) -> float:
        return self.matched / self.egress_packets if self.egress_packets else math.nan

    def delays_s(self) -> list[float]:
        return [o - i for o, i in zip(self.t_out, self.t_in, strict=True)]


def match_packets(ingress: Iterable[Record], egress: Iterable[Record]) -> Matches:
    """Match egress records to ingress records (each input in any order; several captures may be concatenated)."""
    events = sorted([(r[0], 0, r) for r in ingress] + [(r[0], 1, r) for r in egress], key=lambda e: (e[0], e[1]))
    pending: dict[bytes, list[float]] = {}
    pending_flows: dict[bytes, int] = {}
    out_flows: set[bytes] = set()
    m = Matches()
    for t, is_out, (_, key, flow) in events:
        if not is_out:
            pending.setdefault(key, []).append(t)
            pending_flows[flow] = pending_flows.get(flow, 0) + 1
            continue
        m.egress_packets += 1
        out_flows.add(flow)
        waiting = pending.get(key)
        if not waiting:
            m.unmatched_egress += 1
            continue
        m.t_in.append(waiting.pop())  # the most recent one: an older one with the same key was dropped
        m.t_out.append(t)
        pending_flows[flow] -= 1
        if not waiting:
            del pending[key]
    left = {flow: n for flow, n in pending_flows.items() if n}
    m.unmatched_ingress = sum(n for flow, n in left.items() if flow in out_flows)
    m.other_ingress = sum(n for flow, n in left.items() if flow not in out_flows)
    m.ingress_packets = m.matched + m.unmatched_ingress
    return m


def pie_style_values(t_out: Sequence[float], t_in: Sequence[float]) -> list[float]:
    """After each dequeue (egress order): its sojourn, or 0 if the queue was then empty.

    The queue is empty after packet i left when the next packet to leave had
    not yet arrived (dropped packets never enter the queue).
    """
    values = []
    for i, (o, a) in enumerate(zip(t_out, t_in, strict=True)):
        empty = i + 1 == len(t_out) or t_in[i + 1] > o
        values.append(0.0 if empty else o - a)
    return values


def sample_step(t_out: Sequence[float], values: Sequence[float], at: Iterable[float]) -> list[float]:
    """The step function ``values[i]`` from ``t_out[i]`` on, read at each time in ``at`` (0 before the first)."""
    out = []
    for t in at:
        i = bisect.bisect_right(t_out, t) - 1
        out.append(values[i] if i >= 0 else 0.0)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100), like numpy's default."""
    if not values:
        return math.nan
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


@dataclass(frozen=True, kw_only=True)
class DelayFigures:
    """Figures of one egress over a window [t0, t1] of egress times (delays in ms)."""

    packets: int
    mean_per_packet_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    mean_pie_style_ms: float  # PIE's way, sampled at the given instants
    samples: int


def delay_figures(m: Matches, *, window: tuple[float, float], sample_times: Sequence[float]) -> DelayFigures:
    t0, t1 = window
    delays = [(o - i) * 1e3 for o, i in zip(m.t_out, m.t_in, strict=True) if t0 <= o <= t1]
    at = [t for t in sample_times if t0 <= t <= t1]
    pie = sample_step(m.t_out, pie_style_values(m.t_out, m.t_in), at)
    return DelayFigures(
        packets=len(delays), mean_per_packet_ms=mean(delays), p50_ms=percentile(delays, 50),
        p95_ms=percentile(delays, 95), p99_ms=percentile(delays, 99), max_ms=max(delays, default=math.nan),
        mean_pie_style_ms=mean(pie) * 1e3, samples=len(at),
    )
