"""Bytes on the wire of a link, both directions, from captures (``wire.csv``).

For each link in ``experiment.wire_links``, its a-end interface is captured
twice: leaving (``tcpdump -Q out``: the forward direction, a -> b) and
arriving (``-Q in``: the reverse direction). Snap length 96 (headers only:
the pcap records keep each packet's original length, which is what is
counted), IPv4 only, nanosecond timestamps. TSO/GSO/GRO go off on both ends
of every link of the captured node first: a 64 KB super-packet would be
counted as one packet with one set of headers.

The captures start before the run clock and any traffic and stop after the
traffic (1.2 s later: libpcap hands packets over in blocks); they write to a
private temp folder of the run. At the stop, each pcap is accounted
(:mod:`nest_experiments.analysis.wire_bytes`) into ``wire.csv``: one row per link, direction
and protocol (``tcp``, ``udp``, ``other``) with packets, frame, IP, L4-header
and L4-payload bytes; ``wire.json`` holds the taps, tcpdump's own counts
(``dropped_by_kernel`` > 0 means the figures are short: a warning) and the
interfaces whose offloads went off. The pcaps are deleted unless
``experiment.keep_captures`` (then in ``<run>/captures/``).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nest_experiments.analysis import wire_bytes as wire
from nest_experiments.collectors.capture import (
    DRAIN_S,
    SNAPLEN,
    Tcpdumps,
)
from nest_experiments.config import Experiment
from nest_experiments.config.topology import TopologySpec
from nest_experiments.errors import NestExpError
from nest_experiments.net.procs import RunState, require_tool
from nest_experiments.rundir import CAPTURES_DIR, WIRE, WIRE_META, wire_pcap_file, write_csv, write_json

FIELDS = ("link", "node", "dev", "direction", "proto", "packets", "frame_bytes", "ip_bytes", "l4_header_bytes",
          "l4_payload_bytes")
DIRECTIONS = {"out": "forward", "in": "reverse"}  # tcpdump -Q on the a end -> the link's direction


@dataclass(frozen=True, kw_only=True)
class WireTap:
    """One tcpdump on ``link``'s a end (``node``/``dev``), one direction (``out``: forward, ``in``: reverse)."""

    link: str
    node: str
    ns: str
    dev: str
    direction: str

    @property
    def file(self) -> str:
        return wire_pcap_file(self.link, self.direction)

    @property
    def link_direction(self) -> str:
        return DIRECTIONS[self.direction]


def plan_taps(spec: TopologySpec, links: Sequence[str], ns_of: Callable[[str], str]) -> list[WireTap]:
    out = []
    for name in links:
        link = spec.link(name)
        out += [WireTap(link=name, node=link.a, ns=ns_of(link.a), dev=link.ifname(link.a), direction=d)
                for d in ("out", "in")]
    return out


def plan_no_offloads(spec: TopologySpec, taps: Sequence[WireTap]) -> list[tuple[str, str]]:
    """Both ends of every link of every captured node."""
    return sorted({(n, lk.ifname(n)) for t in taps for lk in spec.links_of(t.node) for n in (lk.a, lk.b)})


def rows_for(tap: WireTap, counts: dict[str, wire.Counts]) -> list[dict[str, Any]]:
    return [{"link": tap.link, "node": tap.node, "dev": tap.dev, "direction": tap.link_direction, "proto": proto,
             **asdict(c)} for proto, c in counts.items()]


class WireCapture:
    """The run's wire captures; does nothing when the experiment counts no link's bytes."""

    def __init__(self, run_dir: Path, taps: Sequence[WireTap], *, state: RunState, keep: bool,
                 offloads_off: Callable[[str, str], None], no_offloads: Sequence[tuple[str, str]]) -> None:
        self.run_dir = run_dir
        self.taps = list(taps)
        self.state = state
        self.keep = keep
        self._offloads_off = offloads_off
        self.no_offloads = list(no_offloads)
        self.spool: Path | None = None
        self._dumps: Tcpdumps | None = None
        self.warnings: list[str] = []

    @classmethod
    def for_run(cls, exp: Experiment, net: Any, run_dir: Path) -> WireCapture:
        taps = plan_taps(exp.topology, exp.wire_links, net.ns)
        return cls(run_dir, taps, state=net.state, keep=exp.keep_captures, offloads_off=net.offloads_off,
                   no_offloads=plan_no_offloads(exp.topology, taps))

    def start(self) -> None:
        """Offloads off, every tcpdump started and capturing."""
        if not self.taps:
            return
        require_tool("tcpdump", "tcpdump")
        for node, dev in self.no_offloads:
            self._offloads_off(node, dev)
        self.spool = self.state.temp_dir("wire")
        self._dumps = Tcpdumps(self.spool, "wire capture")
        try:
            self._dumps.start(self.taps)
        except BaseException:
            self.stop(keep=False)
            raise

    def stop(self, *, keep: bool) -> None:
        """Stop the tcpdumps; with ``keep`` (the traffic finished), account them into ``wire.csv``."""
        if self.spool is None:
            return
        if keep and self._dumps:
            time.sleep(DRAIN_S)
        stats = self._dumps.stop() if self._dumps else {}
        try:
            if keep:
                self._account(stats)
        except (OSError, NestExpError) as exc:
            self.warnings.append(f"wire: accounting the captures failed ({exc})")
        finally:
            shutil.rmtree(self.spool, ignore_errors=True)
            self.spool = None

    def _account(self, stats: dict[str, dict[str, int]]) -> None:
        assert self.spool is not None
        started = time.monotonic()
        rows = []
        for tap in self.taps:
            path = self.spool / tap.file
            rows += rows_for(tap, wire.account_pcap(path.read_bytes(), where=tap.file))
            if stats[tap.file].get("dropped_by_kernel"):
                self.warnings.append(f"wire: {tap.file}: tcpdump reports {stats[tap.file]['dropped_by_kernel']} "
                                     "packets dropped by the kernel: the byte counts are short")
        write_csv(self.run_dir / WIRE, FIELDS, rows)
        if self.keep:
            dest = self.run_dir / CAPTURES_DIR
            dest.mkdir(parents=True, exist_ok=True)
            for tap in self.taps:
                shutil.move(self.spool / tap.file, dest / tap.file)
        write_json(self.run_dir / WIRE_META, {
            "file": WIRE, "snaplen": SNAPLEN, "counted": "each record's original length (wire.py)",
            "taps": [{**asdict(t), "file": t.file, "link_direction": t.link_direction} for t in self.taps],
            "offloads_off": [f"{n}/{d}" for n, d in self.no_offloads], "tcpdump_stats": stats,
            "kept": str(CAPTURES_DIR) if self.keep else None, "account_s": round(time.monotonic() - started, 3)})
