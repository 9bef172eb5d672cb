"""Synthetic run folders (DESIGN.md §4 files) for the report tests: no network, no root."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from nest_experiments.rundir import write_csv

ALL_FILES = frozenset({"segments.csv", "qdisc.csv", "qdelay.csv", "subflows.csv", "iperf3_summary.csv", "sipp.csv",
                       "httperf.csv", "links.json"})
BOTTLENECKS = (("bn1", "r1", "r3"), ("bn2", "r2", "r4"))
# the NeST paper's experiment name: its sweeps get the NeST study's report (``make_run(..., experiment=...)`` for others)
CONFIG = """[experiment]
name = "nest_paper"
topology = "multihomed_dumbbell"
duration = "30s"

[apps.video]
kind = "dash"
server = "s2"
client = "h2"

[apps.bg1]
kind = "iperf3"
src = "h1"
dst = "s1"

[apps.voip]
kind = "sipp"

[apps.web]
kind = "httperf"
"""


@dataclass(kw_only=True)
class RunSpec:
    """What one synthetic run holds; every figure is a knob for a test."""

    aqm: str = "pie"
    target_ms: int = 5
    repetition: int = 1
    status: str = "completed"
    reason: str = ""
    extra_point: dict[str, str] = field(default_factory=dict)
    files: frozenset[str] = ALL_FILES
    video_levels: tuple[int, ...] = (0, 1, 1, 2)
    video_rtt_s: float = 1.0
    kernel_delay_ms: float = 5.5  # PIE only
    measured_delay_ms: float = 6.0
    subflow_bytes: tuple[int, int] = (600_000, 400_000)  # on h2_r1 (bn1), h2_r2 (bn2)
    sipp_ok: tuple[int, int] = (200, 200)  # successful, attempted
    httperf_rates: tuple[float, float] = (15.0, 15.0)  # request rate, reply rate
    cpu_saturated_windows: int = 0
    warnings: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        extra = "".join(f"_{v}" for v in self.extra_point.values())
        return f"kind-{self.aqm.replace('_', '')}_target-{self.target_ms}ms{extra}_r{self.repetition}"


LADDER = (145_000, 300_000, 600_000)


def make_run(sweep: Path, spec: RunSpec, *, experiment: str = "nest_paper") -> Path:
    d = sweep / spec.name
    d.mkdir(parents=True)
    point = {f"links.{bn}.forward.qdisc.kind": spec.aqm for bn, _, _ in BOTTLENECKS}
    point |= {f"links.{bn}.forward.qdisc.target": f"{spec.target_ms}ms" for bn, _, _ in BOTTLENECKS}
    manifest = {"status": spec.status, "point": point | spec.extra_point, "repetition": spec.repetition,
                "warnings": list(spec.warnings), "cpu_mean": 0.5, "cpu_max": 0.99 if spec.cpu_saturated_windows else 0.6,
                "cpu_saturated_windows": spec.cpu_saturated_windows, "traffic_start_t": 0.0, "traffic_end_t": 30.0,
                "duration_s": 30.0, "run": spec.name}
    if spec.reason:
        manifest["reason"] = spec.reason
    (d / "manifest.json").write_text(json.dumps(manifest))
    links = "".join(f'\n[links.{bn}.forward.qdisc]\nkind = "{spec.aqm}"\ntarget = "{spec.target_ms}ms"\n'
                    for bn, _, _ in BOTTLENECKS)  # the resolved config names the AQM, as a real run's does
    (d / "config.toml").write_text(CONFIG.replace('name = "nest_paper"', f"name = {experiment!r}") + links)
    if spec.status != "completed":
        return d
    writers = {"links.json": _links, "segments.csv": _segments, "qdisc.csv": _qdisc, "qdelay.csv": _qdelay,
               "subflows.csv": _subflows, "iperf3_summary.csv": _iperf3, "sipp.csv": _sipp, "httperf.csv": _httperf}
    for name in spec.files:
        writers[name](d, spec)
    return d


def _egresses(spec: RunSpec) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for bn, a, b in BOTTLENECKS:
        out.append({"link": bn, "node": a, "peer": b, "dev": b, "leaf_handle": "10:", "qdisc": spec.aqm,
                    "qdisc_params": {"target": spec.target_ms / 1e3}, "rate_bps": 10_000_000, "sampled": True})
        out.append({"link": bn, "node": b, "peer": a, "dev": a, "leaf_handle": "10:", "qdisc": "pfifo",
                    "qdisc_params": {"limit": 1000}, "rate_bps": 10_000_000, "sampled": True})
    return out


def _links(d: Path, spec: RunSpec) -> None:
    (d / "links.json").write_text(json.dumps({"egresses": _egresses(spec)}))


def _segments(d: Path, spec: RunSpec) -> None:
    rows = []
    t = 0.0
    for i, level in enumerate(spec.video_levels):
        rate = LADDER[level]
        size = rate * 4 // 8
        rows.append({"stream": "video", "index": i, "level": level, "bitrate_bps": rate, "bytes": size,
                     "t_request": t, "t_first_byte": t + 0.1, "t_last_byte": t + spec.video_rtt_s, "buffer_s": 4.0 + i,
                     "stall_s": 0.0, "transport": "mptcp", "app": "video"})
        rows.append({"stream": "audio", "index": i, "level": 0, "bitrate_bps": 128_000, "bytes": 64_000,
                     "t_request": t, "t_first_byte": t + 0.05, "t_last_byte": t + 0.5, "buffer_s": 4.0 + i,
                     "stall_s": 0.0, "transport": "mptcp", "app": "video"})
        t += 4.0
    fields = ("stream", "index", "level", "bitrate_bps", "bytes", "t_request", "t_first_byte", "t_last_byte",
              "buffer_s", "stall_s", "transport", "app")
    write_csv(d / "segments.csv", fields, rows)


def _qdisc(d: Path, spec: RunSpec) -> None:
    rows = []
    for k in range(61):
        t = k * 0.5
        for e in _egresses(spec):
            delay = spec.kernel_delay_ms if e["qdisc"] == "pie" else ""
            rows.append({"t": t, "node": e["node"], "dev": e["dev"], "link": e["link"], "kind": e["qdisc"],
                         "handle": "10:", "backlog_bytes": 3000, "backlog_pkts": 2, "drops": k, "sent_pkts": 100 * k,
                         "sent_bytes": 150_000 * k, "delay_ms": delay, "prob": 0.01 if delay != "" else ""})
            rows.append({"t": t, "node": e["node"], "dev": e["dev"], "link": e["link"], "kind": "htb", "handle": "1:",
                         "backlog_bytes": 0, "backlog_pkts": 0, "drops": 0, "sent_pkts": 100 * k,
                         "sent_bytes": 150_000 * k, "delay_ms": "", "prob": ""})
    write_csv(d / "qdisc.csv", ("t", "node", "dev", "link", "kind", "handle", "backlog_bytes", "backlog_pkts", "drops",
                                "sent_pkts", "sent_bytes", "delay_ms", "prob"), rows)


def _qdelay(d: Path, spec: RunSpec) -> None:
    rows = []
    for k in range(300):
        t = k * 0.1
        for _, a, b in BOTTLENECKS:
            rows.append({"t": round(t, 3), "node": a, "dev": b, "delay_ms": spec.measured_delay_ms, "method": "capture"})
    write_csv(d / "qdelay.csv", ("t", "node", "dev", "delay_ms", "method"), rows)


def _subflows(d: Path, spec: RunSpec) -> None:
    rows = []
    for k in range(1, 11):
        for (link, local), total in zip((("h2_r1", "10.0.1.1"), ("h2_r2", "10.0.2.1")), spec.subflow_bytes, strict=True):
            rows.append({"t": float(k), "app": "video", "local": local, "remote": "10.0.8.2", "link": link,
                         "bytes_received": total * k // 10, "bytes_sent": 0})
    write_csv(d / "subflows.csv", ("t", "app", "local", "remote", "link", "bytes_received", "bytes_sent"), rows)


def _iperf3(d: Path, spec: RunSpec) -> None:
    rows = [{"flow": f"bg1.{i}", "src": "h1", "dst": "s1", "bytes": 10_000_000, "seconds": 30.0,
             "bits_per_second": 2_000_000, "retransmits": 5, "mean_rtt_ms": 30.0,
             "receiver_bits_per_second": 1_900_000} for i in range(5)]
    write_csv(d / "iperf3_summary.csv", ("flow", "src", "dst", "bytes", "seconds", "bits_per_second", "retransmits",
                                         "mean_rtt_ms", "receiver_bits_per_second"), rows)


def _sipp(d: Path, spec: RunSpec) -> None:
    ok, attempted = spec.sipp_ok
    write_csv(d / "sipp.csv", ("app", "src", "dst", "calls_attempted", "calls_successful", "calls_failed",
                               "success_ratio", "response_time_mean_ms"),
              [{"app": "voip", "src": "h1", "dst": "s1", "calls_attempted": attempted, "calls_successful": ok,
                "calls_failed": attempted - ok, "success_ratio": ok / attempted if attempted else 0,
                "response_time_mean_ms": 3.0}])


def _httperf(d: Path, spec: RunSpec) -> None:
    req, rep = spec.httperf_rates
    write_csv(d / "httperf.csv", ("app", "src", "dst", "request_rate", "requests", "replies", "reply_rate_avg",
                                  "reply_time_ms", "errors_total", "reply_ratio"),
              [{"app": "web", "src": "h3", "dst": "s3", "request_rate": req, "requests": int(req * 30),
                "replies": int(rep * 30), "reply_rate_avg": rep, "reply_time_ms": 4.0, "errors_total": 0,
                "reply_ratio": rep / req if req else 0}])


def make_sweep(root: Path, *, reps: int = 4, targets: tuple[int, ...] = (5, 10, 15)) -> Path:
    """PIE and FQ-PIE at every target, ``reps`` repetitions; FQ-PIE streams higher levels with lower RTT."""
    sweep = root / "synth"
    for target in targets:
        for rep in range(1, reps + 1):
            make_run(sweep, RunSpec(aqm="pie", target_ms=target, repetition=rep, video_levels=(0, 1, 0, 1),
                                    video_rtt_s=1.6 + 0.01 * rep, kernel_delay_ms=target * 1.1,
                                    measured_delay_ms=target * 1.2))
            make_run(sweep, RunSpec(aqm="fq_pie", target_ms=target, repetition=rep, video_levels=(0, 1, 2, 2),
                                    video_rtt_s=1.2 + 0.01 * rep, measured_delay_ms=target * 2.0 + rep))
    return sweep
