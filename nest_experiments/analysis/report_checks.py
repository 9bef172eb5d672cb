"""Sanity checks a study can ask of its runs: apps that worked, AQMs in their band, DASH bytes per path.

Pure: each check reads one run folder (DESIGN.md §4) or a cell's loaded runs.
A study (:mod:`nest_experiments.studies`) picks the checks and their
thresholds; a check on an app the experiment lacks is left out, and a check
that cannot be made (file absent) fails and says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from nest_experiments.analysis.axes import CellKey
from nest_experiments.analysis.report import (
    AqmEgress,
    CellCheck,
    Check,
    Metric,
    RunInput,
    RunResult,
    delay_metric,
    estimate,
    ok,
)
from nest_experiments.config import topology
from nest_experiments.errors import NestExpError
from nest_experiments.rundir import HTTPERF, IPERF3_SUMMARY, MPTCP, SEGMENTS, SIPP, SUBFLOWS, RunFolder

MIN_SIPP_SUCCESS = 0.90
MIN_HTTPERF_REPLY = 0.90


def app_kinds(run_dir: Path) -> set[str]:
    """The ``kind`` of every app in the run's resolved ``config.toml``."""
    data = RunFolder(run_dir).config()
    return {str(a.get("kind")) for a in (data.get("apps") or {}).values() if isinstance(a, dict)}


# ---------------------------------------------------------------- background apps


def app_checks(run: RunInput) -> list[Check]:
    """iperf3 flows moved data, SIPp calls succeeded, httperf was answered (each when the experiment has it)."""
    kinds = app_kinds(run.run_dir)
    return (_iperf3_checks(run.run_dir, "iperf3" in kinds) + _sipp_checks(run.run_dir, "sipp" in kinds)
            + _httperf_checks(run.run_dir, "httperf" in kinds))


def _missing(name: str, file: str) -> list[Check]:
    return [Check(name=name, subject="-", status="fail", detail=f"{file} absent although the experiment has the app")]


def _iperf3_checks(run_dir: Path, expected: bool) -> list[Check]:
    s = RunFolder(run_dir).frame(IPERF3_SUMMARY)
    if s is None:
        return _missing("iperf3 flow moved data", IPERF3_SUMMARY) if expected else []
    if s.empty:
        return [Check(name="iperf3 flow moved data", subject="-", status="fail", detail="no flow in the summary")]
    out = []
    for _, r in s.iterrows():
        moved = float(r.get("bytes", 0) or 0)
        rx = r.get("receiver_bits_per_second")
        detail = f"{moved / 1e6:.2f} MB sent" + (f", {float(rx) / 1e6:.2f} Mbit/s received" if pd.notna(rx) else "")
        out.append(Check(name="iperf3 flow moved data", subject=str(r.get("flow", "?")), status=ok(moved > 0),
                         detail=detail, value=moved / 1e6, unit="MB per flow"))
    return out


def _ratio_checks(run_dir: Path, expected: bool, *, file: str, name: str, part: str, whole: str, minimum: float,
                  detail: str, unit: str) -> list[Check]:
    """One check per row of an app's CSV: ``part / whole >= minimum`` (e.g. calls succeeded / attempted)."""
    s = RunFolder(run_dir).frame(file)
    if s is None:
        return _missing(name, file) if expected else []
    out = []
    for _, r in s.iterrows():
        num, den = float(r.get(part, 0) or 0), float(r.get(whole, 0) or 0)
        ratio = num / den if den else 0.0
        out.append(Check(name=name, subject=f"{r.get('app', '?')} {r.get('src', '')}->{r.get('dst', '')}",
                         status=ok(den > 0 and ratio >= minimum),
                         detail=detail.format(num=num, den=den) + f" ({ratio:.1%}; pass >= {minimum:.0%})",
                         value=100 * ratio, unit=unit))
    return out or [Check(name=name, subject="-", status="fail", detail=f"{file} has no rows")]


def _sipp_checks(run_dir: Path, expected: bool) -> list[Check]:
    return _ratio_checks(run_dir, expected, file=SIPP, name="SIPp calls succeeded", part="calls_successful",
                         whole="calls_attempted", minimum=MIN_SIPP_SUCCESS, detail="{num:.0f}/{den:.0f} calls",
                         unit="% of calls succeeded")


def _httperf_checks(run_dir: Path, expected: bool) -> list[Check]:
    return _ratio_checks(run_dir, expected, file=HTTPERF, name="httperf reply rate", part="reply_rate_avg",
                         whole="request_rate", minimum=MIN_HTTPERF_REPLY,
                         detail="{num:.2f} replies/s for {den:.2f} requests/s", unit="% of the request rate")


# ---------------------------------------------------------------- AQMs


def pie_checks(egs: Sequence[AqmEgress], means: dict[Metric, float], band: tuple[float, float]) -> list[Check]:
    """PIE's mean delay as the kernel reports it (steady window) within ``band`` x its target, per egress."""
    out = []
    lo, hi = band
    for e in (e for e in egs if e.kind == "pie"):
        mean = means.get(delay_metric(e.name, "kernel"))
        if e.target_ms is None or mean is None:
            why = "no target recorded in links.json" if e.target_ms is None else "no kernel delay_ms samples"
            out.append(Check(name="PIE kernel delay / target", subject=e.name, status="fail", detail=why))
            continue
        ratio = mean / e.target_ms
        out.append(Check(name="PIE kernel delay / target", subject=e.name, status=ok(lo <= ratio <= hi),
                         detail=f"mean {mean:.2f} ms, target {e.target_ms:g} ms ({ratio:.2f}x; "
                                f"pass within {lo:g}x-{hi:g}x)", value=ratio, unit="x target"))
    return out


def fq_pie_checks(egs: Sequence[AqmEgress], means: dict[Metric, float]) -> list[Check]:
    """FQ-PIE (whose delay the kernel does not report) has a measured series (``qdelay.csv``), per egress."""
    out = []
    for e in (e for e in egs if e.kind == "fq_pie"):
        measured = {str(m.source): v for m, v in means.items() if m.egress == e.name and m.source != "kernel"}
        detail = ", ".join(f"{src}: mean {v:.2f} ms" for src, v in sorted(measured.items()))
        out.append(Check(name="FQ-PIE measured delay series", subject=e.name, status=ok(bool(measured)),
                         detail=detail or "no qdelay.csv samples for this egress in the steady window",
                         value=min(measured.values()) if measured else None, unit="ms mean measured delay"))
    return out


def pie_cell_checks(runs: Sequence[RunResult], cell: CellKey, band: tuple[float, float]) -> list[CellCheck]:
    """PIE's kernel delay averaged over the cell's repetitions, against the target (per egress)."""
    context, at, compared = cell
    out = []
    lo, hi = band
    egs = {e.name: e for r in runs for e in r.egresses if e.kind == "pie"}
    for name, e in sorted(egs.items()):
        means = [r.metrics.get(delay_metric(name, "kernel").key) for r in runs]
        est = estimate(means)
        if est.mean is None or e.target_ms is None:
            out.append(CellCheck(context=context, at=at, compared=compared, name=f"PIE mean kernel delay / target, {name}",
                                 passed=0, total=1, detail="no kernel delay or no target"))
            continue
        ratio = est.mean / e.target_ms
        out.append(CellCheck(context=context, at=at, compared=compared, name=f"PIE mean kernel delay / target, {name}",
                             passed=int(lo <= ratio <= hi), total=1,
                             detail=f"{est.mean:.2f} ms over {est.n} run(s) vs {e.target_ms:g} ms ({ratio:.2f}x)"))
    return out


# ---------------------------------------------------------------- DASH over several paths


def dash_split_checks(run: RunInput, minimum: float) -> list[Check]:
    """Each bottleneck carried at least ``minimum`` of the DASH bytes (MPTCP subflows, ``subflows.csv``)."""
    name = "DASH bytes per bottleneck"
    links = run.bottlenecks
    if not links or not ("dash" in app_kinds(run.run_dir) or RunFolder(run.run_dir).has(SEGMENTS)):
        return []
    sub = RunFolder(run.run_dir).frame(SUBFLOWS)
    if sub is None or sub.empty:
        why = f"{SUBFLOWS} absent" if sub is None else f"{SUBFLOWS} has no rows"
        return [Check(name=name, subject=link, status="fail", detail=why) for link in links]
    per_link = _bytes_per_bottleneck(run.run_dir, sub, links)
    total = sum(per_link.values())
    out = []
    for link in links:
        share = per_link.get(link, 0.0) / total if total else 0.0
        hint = _mptcp_hint(run.run_dir) if share < minimum else ""
        out.append(Check(name=name, subject=link, status=ok(share >= minimum),
                         detail=f"{share:.1%} of {total / 1e6:.2f} MB (pass >= {minimum:.0%}){hint}",
                         value=100 * share, unit="% of the DASH bytes"))
    unmapped = per_link.get("", 0.0)
    if unmapped:
        out.append(Check(name=name, subject="(no bottleneck)", status="fail",
                         detail=f"{unmapped / 1e6:.2f} MB on subflows not mapped to an AQM bottleneck"))
    return out


def _mptcp_hint(run_dir: Path) -> str:
    """What the players' kernels counted (``mptcp.json``): connections, ADD_ADDRs received, joins answered."""
    try:
        apps = RunFolder(run_dir).json(MPTCP)
    except (OSError, ValueError):
        return ""
    parts = []
    for app in apps.values():
        player = app.get("counters", {}).get(app.get("client"), {})
        parts.append(f"player's kernel: {player.get('MPCapableSYNACKRX', 0)} connections, "
                     f"{player.get('AddAddr', 0)} ADD_ADDRs received, {player.get('MPJoinSynAckRx', 0)} joins answered")
    return f"; {'; '.join(parts)} (mptcp.json)" if parts else ""


def _bytes_per_bottleneck(run_dir: Path, sub: pd.DataFrame, links: Sequence[str]) -> dict[str, float]:
    """Bytes of each subflow (the last sample of its counters), summed per bottleneck link."""
    if "side" in sub:  # a server row counts its connection's bytes again (collectors.subflows)
        sub = sub[sub["side"].fillna("client") == "client"]
    counters = [c for c in ("bytes_received", "bytes_sent") if c in sub]
    keys = [c for c in ("app", "local", "local_port", "remote", "remote_port", "link") if c in sub]
    last = sub.fillna({"link": ""}).groupby(keys)[counters].max().reset_index()
    last["total"] = last[counters].sum(axis=1)
    mapping = _link_to_bottleneck(run_dir, links)
    out: dict[str, float] = {}
    for access, total in last.groupby("link")["total"].sum().items():
        bn = mapping.get(str(access), "")
        out[bn] = out.get(bn, 0.0) + float(total)
    return out


def _link_to_bottleneck(run_dir: Path, links: Sequence[str]) -> dict[str, str]:
    """Client access link -> the AQM bottleneck sharing its far end (``h2_r1`` -> ``bn1``)."""
    mapping = {link: link for link in links}
    try:
        name = RunFolder(run_dir).config()["experiment"]["topology"]
        spec = topology.load("experiment.topology", str(name))
    except (KeyError, TypeError, NestExpError):
        return mapping
    by_name = {lk.name: lk for lk in spec.links}
    for access in spec.links:
        if access.name in mapping:
            continue
        near = [bn for bn in links if bn in by_name and {access.a, access.b} & {by_name[bn].a, by_name[bn].b}]
        if len(near) == 1:
            mapping[access.name] = near[0]
    return mapping
