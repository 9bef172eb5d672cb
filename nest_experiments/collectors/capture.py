"""Capture-based queue delay: tcpdump on a router during the run, matching after it.

For each link in ``experiment.qdelay_links``, the forward egress (router a ->
b) is captured leaving (``tcpdump -Q out`` on that interface) and every other
interface of the router arriving (``-Q in``), nanosecond timestamps, snap
length 96, IPv4 only; TSO/GSO/GRO go off on both ends of the router's links
(a super-packet would arrive as one and leave as many). One tcpdump per interface and direction rather than
one ``-i any`` (LINUX_SLL2) per router: that is what DESIGN §2b verified
(100% matched, unmatched = the qdisc's drops), each file holds only what is
matched, and the kernel filters the direction per socket; a router has few
interfaces, and the processes sleep between packets.

During the run (:class:`PacketCapture`): the captures start before the run
clock and any traffic, each one ready ("listening on") before the next step;
they write to a private temp folder (in the VM, the guest's tmpfs rather
than 9p), listed in the run's state file so that a dead run's files are
removed; they stop after the traffic, 1.2 s later (libpcap hands packets to
tcpdump in blocks with a 1 s timeout), and the pcaps move to
``<run>/captures/`` with ``capture.json``: the files, tcpdump's own drop
counts, and (monotonic, realtime) clock pairs — packet timestamps are
CLOCK_REALTIME, the run clock is monotonic.

After the run (:func:`match_captures`; on the host: right after the run's
network is gone, or after the VM exits for a VM sweep): matching
(:mod:`nest_experiments.analysis.qdelay`), ``qdelay.csv`` (DESIGN §4),
``qdelay_summary.json``, then the pcaps are deleted unless
``experiment.keep_captures``. A failure becomes a warning in the manifest,
never a lost run.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from pathlib import Path
from typing import IO, Any, Protocol, TextIO

from nest_experiments.analysis import qdelay
from nest_experiments.config import Experiment
from nest_experiments.config.topology import TopologySpec
from nest_experiments.errors import NestExpError, RunError
from nest_experiments.net.procs import RunState, popen_in_ns, require_tool, stop_all
from nest_experiments.rundir import (
    CAPTURE_META,
    CAPTURES_DIR,
    LINKS,
    MANIFEST,
    QDELAY,
    QDELAY_SUMMARY,
    QDISC,
    pcap_file,
    read_csv,
    read_manifest,
    write_csv,
    write_json,
)

SNAPLEN = 96
BUFFER_KIB = 8192  # per capture; the TCG guest may fall behind for a moment
READY_TIMEOUT_S = 60.0
DRAIN_S = 1.2
QDELAY_FIELDS = ("t", "node", "dev", "delay_ms", "method")


@dataclass(frozen=True, kw_only=True)
class EgressTarget:
    """One measured egress: ``node``'s interface ``dev`` towards the link's b end; ingress = its other interfaces."""

    link: str
    node: str
    ns: str
    dev: str
    ingress_devs: tuple[str, ...]
    # the router runtime (net.routed): the queue is in the guest between a's TAP and b's, so packets are seen
    # leaving it arriving at b (``-Q in`` on b's end of the link); "" = leaving ``dev`` (``-Q out``)
    exit_node: str = ""
    exit_ns: str = ""
    exit_dev: str = ""


@dataclass(frozen=True, kw_only=True)
class Tap:
    """One tcpdump: ``dev`` on ``node`` in one direction (``in`` | ``out``)."""

    node: str
    ns: str
    dev: str
    direction: str

    @property
    def file(self) -> str:
        return pcap_file(self.node, self.dev, self.direction)


def plan_targets(exp: Experiment, ns_of: Any, routed: Sequence[str] = ()) -> list[EgressTarget]:
    """The egresses ``exp.qdelay_links`` asks for (config checked: a is a router, forward has a qdisc);
    ``routed``: the links whose queue is in the router guest (measured to b's end of the link)."""
    spec = exp.topology
    out = []
    for name in exp.qdelay_links:
        link = spec.link(name)
        dev = link.ifname(link.a)
        others = tuple(lk.ifname(link.a) for lk in spec.links_of(link.a) if lk.ifname(link.a) != dev)
        exit_at = ({"exit_node": link.b, "exit_ns": ns_of(link.b), "exit_dev": link.ifname(link.b)}
                   if name in routed else {})
        out.append(EgressTarget(link=name, node=link.a, ns=ns_of(link.a), dev=dev, ingress_devs=others, **exit_at))
    return out


def plan_taps(targets: Sequence[EgressTarget]) -> list[Tap]:
    taps: dict[tuple[str, str, str], Tap] = {}
    for t in targets:
        for dev, direction in [(t.dev, "out"), *((d, "in") for d in t.ingress_devs)]:
            taps.setdefault((t.node, dev, direction), Tap(node=t.node, ns=t.ns, dev=dev, direction=direction))
        if t.exit_node:
            taps.setdefault((t.exit_node, t.exit_dev, "in"),
                            Tap(node=t.exit_node, ns=t.exit_ns, dev=t.exit_dev, direction="in"))
    return list(taps.values())


def plan_no_offloads(spec: TopologySpec, targets: Sequence[EgressTarget]) -> list[tuple[str, str]]:
    """Both ends of every link of a measured router: with TSO/GSO/GRO on, a 64 KB super-packet arrives
    and leaves as 45 segments, of which only the first would match (measured: 28% matched)."""
    ends = {(n, lk.ifname(n)) for t in targets for lk in spec.links_of(t.node) for n in (lk.a, lk.b)}
    return sorted(ends)


class TapLike(Protocol):
    """What a tcpdump needs of a tap (:class:`Tap`, :class:`nest_experiments.collectors.wire.WireTap`)."""

    @property
    def node(self) -> str: ...
    @property
    def ns(self) -> str: ...
    @property
    def dev(self) -> str: ...
    @property
    def direction(self) -> str: ...
    @property
    def file(self) -> str: ...


def tcpdump_argv(tap: TapLike, path: Path) -> list[str]:
    return ["tcpdump", "-n", "-i", tap.dev, "-Q", tap.direction, "-s", str(SNAPLEN), "--time-stamp-precision=nano",
            "-B", str(BUFFER_KIB), "-Z", "root", "-w", str(path), "ip"]


def clock_pair() -> tuple[float, float]:
    """(monotonic, realtime) read as close together as we can: the tightest of a few tries."""
    best = (math.inf, 0.0, 0.0)
    for _ in range(5):
        a = time.monotonic()
        r = time.time()
        b = time.monotonic()
        if b - a < best[0]:
            best = (b - a, (a + b) / 2, r)
    return best[1], best[2]


def parse_tcpdump_stats(text: str) -> dict[str, int]:
    """tcpdump's closing lines: ``N packets captured``, ``... received by filter``, ``... dropped by kernel``."""
    stats = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0].isdigit() and words[1] == "packets":
            stats["_".join(words[2:])] = int(words[0])
    return stats


class Tcpdumps:
    """One tcpdump per tap, each writing ``spool/<tap.file>`` (its stderr beside it, ``.log``)."""

    def __init__(self, spool: Path, what: str) -> None:
        self.spool, self.what = spool, what
        self._procs: list[tuple[TapLike, subprocess.Popen[bytes], IO[bytes]]] = []

    def start(self, taps: Sequence[TapLike]) -> None:
        """Start every tcpdump and wait until each is capturing (on failure: all stopped, then the error)."""
        try:
            for tap in taps:
                log = (self.spool / f"{tap.file}.log").open("wb")
                argv = tcpdump_argv(tap, self.spool / tap.file)
                self._procs.append((tap, popen_in_ns(tap.ns, argv, stdout=subprocess.DEVNULL, stderr=log), log))
            for tap, proc, _ in self._procs:
                self._wait_ready(tap, proc)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, tap: TapLike, proc: subprocess.Popen[bytes]) -> None:
        log = self.spool / f"{tap.file}.log"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "listening on" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                lines = log.read_text(errors="replace").strip().splitlines()
                why = lines[-1] if lines else f"exit {proc.returncode}" if proc.returncode is not None else "no answer"
                raise RunError(f"{self.what} on {tap.node}/{tap.dev} ({tap.direction}) did not start: {why}")
            time.sleep(0.05)

    def stop(self) -> dict[str, dict[str, int]]:
        """Stop them all; per file, the exit code and tcpdump's own counts."""
        stats = {}
        codes = stop_all([proc for _, proc, _ in self._procs], timeout_s=10.0)  # each flushes its file
        for (tap, _, log), code in zip(self._procs, codes, strict=True):
            log.close()
            text = (self.spool / f"{tap.file}.log").read_text(errors="replace")
            stats[tap.file] = {"exit": code, **parse_tcpdump_stats(text)}
        self._procs = []
        return stats

    def __bool__(self) -> bool:
        return bool(self._procs)


class PacketCapture:
    """The run's tcpdumps; does nothing when the experiment measures no queue delay."""

    def __init__(self, run_dir: Path, targets: Sequence[EgressTarget], *, state: RunState, keep: bool,
                 offloads_off: Callable[[str, str], None] | None = None, spec: TopologySpec | None = None) -> None:
        self.run_dir = run_dir
        self.targets = list(targets)
        self.taps = plan_taps(self.targets)
        self.state = state
        self.keep = keep
        self._offloads_off = offloads_off
        self.no_offloads = plan_no_offloads(spec, self.targets) if spec else []
        self.spool: Path | None = None
        self._dumps: Tcpdumps | None = None
        self._clock: list[tuple[float, float]] = []
        self._version = ""

    @classmethod
    def for_run(cls, exp: Experiment, net: Any, run_dir: Path) -> PacketCapture:
        return cls(run_dir, plan_targets(exp, net.ns, tuple(getattr(net, "routed", {}))), state=net.state,
                   keep=exp.keep_captures,
                   offloads_off=net.offloads_off, spec=exp.topology)

    def start(self) -> None:
        """Start every tcpdump and wait until each is capturing."""
        if not self.taps:
            return
        require_tool("tcpdump", "tcpdump")
        self._version = _tcpdump_version()
        for node, dev in self.no_offloads:
            if self._offloads_off:
                self._offloads_off(node, dev)
        self.spool = self.state.temp_dir("capture")
        self._dumps = Tcpdumps(self.spool, "capture")
        try:
            self._dumps.start(self.taps)
        except BaseException:
            self.stop(t0=0.0, keep=False)
            raise
        self._clock.append(clock_pair())

    def stop(self, *, t0: float, keep: bool) -> None:
        """Stop the tcpdumps; with ``keep``, move the pcaps into ``<run>/captures/`` with ``capture.json``."""
        if self.spool is None:
            return
        if keep and self._dumps:
            time.sleep(DRAIN_S)
        self._clock.append(clock_pair())
        stats = self._dumps.stop() if self._dumps else {}
        try:
            if keep:
                self._move(t0, stats)
        finally:
            shutil.rmtree(self.spool, ignore_errors=True)
            self.spool = None

    def _move(self, t0: float, stats: dict[str, dict[str, int]]) -> None:
        assert self.spool is not None
        dest = self.run_dir / CAPTURES_DIR
        dest.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        size = 0
        for tap in self.taps:
            size += (self.spool / tap.file).stat().st_size
            shutil.move(self.spool / tap.file, dest / tap.file)
        meta = {
            "t0_monotonic": t0, "clock_pairs": [{"monotonic": m, "realtime": r} for m, r in self._clock],
            "keep": self.keep, "snaplen": SNAPLEN, "tcpdump": self._version, "bytes": size,
            "move_s": round(time.monotonic() - started, 3), "spool": str(self.spool),
            "offloads_off": [f"{n}/{d}" for n, d in self.no_offloads],
            "targets": [asdict(t) for t in self.targets], "taps": [{**asdict(t), "file": t.file} for t in self.taps],
            "tcpdump_stats": stats,
        }
        write_json(dest / CAPTURE_META, meta)


@functools.cache
def _tcpdump_version() -> str:
    """tcpdump's version line, asked once per process (a process costs ~0.3 s under TCG)."""
    out = subprocess.run(["tcpdump", "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).splitlines()[0].strip() if (out.stdout or out.stderr) else ""


# ---------------------------------------------------------------- after the run


def read_records(path: Path, offset: Decimal) -> Iterator[qdelay.Record]:
    """Records of a pcap, times on the run clock (``t = timestamp - offset``; tcpdump's nanosecond stamps, which
    dpkt reads as Decimals)."""
    import dpkt

    with path.open("rb") as fh:
        reader = dpkt.pcap.Reader(fh)
        linktype = reader.datalink()
        if not qdelay.supported_linktype(linktype):
            raise RunError(f"{path.name}: link type {linktype} not supported")
        packets = iter(reader)
        while True:
            try:
                ts, frame = next(packets)
            except StopIteration:
                return
            except (dpkt.NeedData, dpkt.UnpackError):
                return  # a record cut short when tcpdump stopped
            rec = qdelay.frame_record(float(ts - offset), frame, linktype)
            if rec is not None:
                yield rec


def run_clock_offset(meta: dict[str, Any]) -> tuple[Decimal, float]:
    """(realtime - run clock) from the first clock pair, and how far the last pair disagrees (s)."""
    pairs = [(p["monotonic"], p["realtime"]) for p in meta["clock_pairs"]]
    first = pairs[0][1] - pairs[0][0]
    drift = max(abs((r - m) - first) for m, r in pairs)
    return Decimal(repr(pairs[0][1])) - Decimal(repr(pairs[0][0])) + Decimal(repr(meta["t0_monotonic"])), drift


def match_captures(run_dir: Path, manifest: dict[str, Any]) -> list[str]:
    """Match a run's pcaps into ``qdelay.csv`` and ``qdelay_summary.json``; returns warnings, never raises.

    ``manifest`` (the run's, in memory) gets a ``qdelay`` entry. Does nothing
    when the run has no captures.
    """
    cap = run_dir / CAPTURES_DIR
    if not (cap / CAPTURE_META).exists():
        return []
    try:
        meta = json.loads((cap / CAPTURE_META).read_text())
        summary, warnings = _match(run_dir, meta)
    except Exception as exc:  # noqa: BLE001  (a bug or a bad file must not lose the run)
        return [f"qdelay: matching the captures failed ({type(exc).__name__}: {exc}); pcaps kept in {cap}"]
    manifest["qdelay"] = {"file": QDELAY, "summary": QDELAY_SUMMARY, "methods": sorted(METHODS),
                          "egresses": {f"{s['node']}/{s['dev']}": {k: s[k] for k in SUMMARY_BRIEF} for s in summary}}
    if not meta.get("keep"):
        shutil.rmtree(cap, ignore_errors=True)
    return warnings


METHODS = {
    qdelay.METHOD_PER_PACKET: "sojourn through the router of every matched packet, t = its egress time "
                              "(tcpdump -Q in on the router's other interfaces, -Q out on the egress)",
    qdelay.METHOD_PIE_STYLE: "PIE's way, at the qdisc sampler's instants: sojourn of the last packet out, "
                             "0 when the queue was empty after it",
}
SUMMARY_BRIEF = ("matched_fraction", "unmatched_ingress", "qdisc_drops", "mean_per_packet_ms", "mean_pie_style_ms",
                 "p95_ms", "kernel_mean_delay_ms")


def _match(run_dir: Path, meta: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    from nest_experiments.analysis.results import steady_window

    started = time.monotonic()
    cap = run_dir / CAPTURES_DIR
    offset, drift = run_clock_offset(meta)
    warnings = [f"qdelay: realtime moved {drift * 1e3:.1f} ms against monotonic during the capture"] if drift > 1e-3 else []
    for file, st in meta["tcpdump_stats"].items():
        if st.get("dropped_by_kernel"):
            warnings.append(f"qdelay: {file}: tcpdump reports {st['dropped_by_kernel']} packets dropped by the kernel")
    egresses = {(e["node"], e["dev"]): e for e in _links(run_dir)}
    qrows = read_csv(run_dir / QDISC) if (run_dir / QDISC).exists() else []
    window = steady_window(run_dir)
    rows: list[dict[str, Any]] = []
    summary = []
    for target in meta["targets"]:
        node, dev = target["node"], target["dev"]
        ingress = [r for d in target["ingress_devs"] for r in read_records(cap / pcap_file(node, d, "in"), offset)]
        exit_file = (pcap_file(target["exit_node"], target["exit_dev"], "in") if target.get("exit_node")
                     else pcap_file(node, dev, "out"))
        exits = list(read_records(cap / exit_file, offset))
        m = qdelay.match_packets(ingress, exits)
        leaf = _leaf_rows(qrows, egresses.get((node, dev), {}), node, dev)
        times = sorted({float(r["t"]) for r in leaf})
        s = _summary(target, m, window, times, leaf, egresses.get((node, dev), {}))
        if target.get("exit_node"):  # the router runtime: the host's part (to a's TAP) and the guest's apart
            s.update(_split(cap, offset, ingress, exits, node, dev, window))
        summary.append(s)
        warnings += _checks(s)
        rows += _rows(node, dev, m, times)
    write_csv(run_dir / QDELAY, QDELAY_FIELDS, rows)
    write_json(run_dir / QDELAY_SUMMARY, {"methods": METHODS, "window_s": list(window),
                                                 "match_s": round(time.monotonic() - started, 2),
                                                 "capture_bytes": meta.get("bytes"), "capture_move_s": meta.get("move_s"),
                                                 "egresses": summary})
    return summary, warnings


def _split(cap: Path, offset: Decimal, ingress: list[qdelay.Record], exits: list[qdelay.Record], node: str,
           dev: str, window: tuple[float, float]) -> dict[str, Any]:
    """A routed link's per-packet delay in two parts: from the router's ingress to its TAP (``-Q out``: the host's
    forwarding and the TAP's own queue) and from the TAP through the guest (its path, its qdisc) to b's end."""
    tap_out = list(read_records(cap / pcap_file(node, dev, "out"), offset))
    out: dict[str, Any] = {}
    for name, m in (("host_part", qdelay.match_packets(ingress, tap_out)),
                    ("guest_part", qdelay.match_packets(tap_out, exits))):
        f = qdelay.delay_figures(m, window=window, sample_times=[])
        out[f"{name}_mean_ms"], out[f"{name}_p99_ms"] = _r(f.mean_per_packet_ms), _r(f.p99_ms)
    return out


def _links(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / LINKS
    return list(json.loads(path.read_text())["egresses"]) if path.exists() else []


def _leaf_rows(qrows: list[dict[str, str]], egress: dict[str, Any], node: str, dev: str) -> list[dict[str, str]]:
    rows = [r for r in qrows if r["node"] == node and r["dev"] == dev]
    handle = egress.get("leaf_handle")
    return [r for r in rows if r.get("handle") == handle] if handle else rows


def _summary(target: dict[str, Any], m: qdelay.Matches, window: tuple[float, float], times: list[float],
             leaf: list[dict[str, str]], egress: dict[str, Any]) -> dict[str, Any]:
    f = qdelay.delay_figures(m, window=window, sample_times=times)
    drops = [int(r["drops"]) for r in leaf if r.get("drops")]
    kernel = [float(r["delay_ms"]) for r in leaf if r.get("delay_ms") and window[0] <= float(r["t"]) <= window[1]]
    kernel_mean = qdelay.mean(kernel) if kernel else None
    s: dict[str, Any] = {
        "link": target["link"], "node": target["node"], "dev": target["dev"], "qdisc": egress.get("qdisc"),
        "egress_packets": m.egress_packets, "matched": m.matched, "matched_fraction": _r(m.matched_fraction, 5),
        "unmatched_egress": m.unmatched_egress, "ingress_packets": m.ingress_packets,
        "unmatched_ingress": m.unmatched_ingress, "other_ingress": m.other_ingress,
        "qdisc_drops": max(drops) - min(drops) if drops else None,
        "window_packets": f.packets, "mean_per_packet_ms": _r(f.mean_per_packet_ms), "p50_ms": _r(f.p50_ms),
        "p95_ms": _r(f.p95_ms), "p99_ms": _r(f.p99_ms), "max_ms": _r(f.max_ms),
        "mean_pie_style_ms": _r(f.mean_pie_style_ms), "pie_style_samples": f.samples,
        "kernel_mean_delay_ms": _r(kernel_mean) if kernel_mean is not None else None,
    }
    if kernel_mean:
        s["ratio_pie_style_to_kernel"] = _r(f.mean_pie_style_ms / kernel_mean, 4)
        s["ratio_per_packet_to_kernel"] = _r(f.mean_per_packet_ms / kernel_mean, 4)
    return s


def _r(x: float, digits: int = 4) -> float | None:
    return None if x is None or math.isnan(x) else round(x, digits)


def _checks(s: dict[str, Any]) -> list[str]:
    where = f"qdelay {s['node']}/{s['dev']}"
    out = []
    if s["egress_packets"] == 0:
        out.append(f"{where}: no packets captured on the egress")
    elif s["matched_fraction"] is not None and s["matched_fraction"] < 0.95:
        out.append(f"{where}: only {s['matched_fraction']:.1%} of egress packets matched")
    if s["qdisc_drops"] is not None and abs(s["unmatched_ingress"] - s["qdisc_drops"]) > max(10, 0.05 * s["qdisc_drops"]):
        out.append(f"{where}: {s['unmatched_ingress']} ingress packets unmatched but the qdisc dropped {s['qdisc_drops']}")
    return out


def _rows(node: str, dev: str, m: qdelay.Matches, times: list[float]) -> list[dict[str, Any]]:
    rows = [{"t": round(o, 6), "node": node, "dev": dev, "delay_ms": round((o - i) * 1e3, 4),
             "method": qdelay.METHOD_PER_PACKET} for o, i in zip(m.t_out, m.t_in, strict=True)]
    pie = qdelay.sample_step(m.t_out, qdelay.pie_style_values(m.t_out, m.t_in), times)
    rows += [{"t": t, "node": node, "dev": dev, "delay_ms": round(v * 1e3, 4), "method": qdelay.METHOD_PIE_STYLE}
             for t, v in zip(times, pie, strict=True)]
    return rows


def match_sweep_captures(folder: Path, out: TextIO = sys.stderr) -> None:
    """After a VM sweep, on the host: match every run under ``folder`` with pcaps and no ``qdelay.csv``."""
    for run_dir in sorted(p.parent.parent for p in folder.glob(f"*/{CAPTURES_DIR}/{CAPTURE_META}")):
        if (run_dir / QDELAY).exists():
            continue
        manifest = read_manifest(run_dir)
        if manifest is None:
            continue
        try:
            warnings = match_captures(run_dir, manifest)
            manifest["warnings"] = list(manifest.get("warnings", [])) + warnings
            write_json(run_dir / MANIFEST, manifest)
        except (OSError, NestExpError) as exc:
            print(f"{run_dir.name}: queue delay from captures failed: {exc}", file=out, flush=True)
            continue
        brief = manifest.get("qdelay", {}).get("egresses", {})
        print(f"{run_dir.name}: queue delay from captures: {json.dumps(brief)}", file=out, flush=True)
