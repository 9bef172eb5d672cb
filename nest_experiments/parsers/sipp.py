"""SIPp statistics (``-trace_stat``, ``-trace_rtt``) -> one summary row per app (pure).

``-trace_stat`` writes a ``;``-separated file: one header line, then one row
every ``-fd`` seconds and a last one when sipp ends. Counters come in pairs,
``X(P)`` for the period and ``X(C)`` cumulative; durations are written
``HH:MM:SS:uuuuuu``. ``-trace_rtt`` writes ``Date_ms;response_time_ms;rtd_no``
per call (with ``-rtt_freq 1``): the response time of the scenario's ``rtd``
mark, here INVITE sent -> 200 OK received (call set-up time), in whole ms.
SIPp counts no RTP packets when it plays a pcap or echoes RTP, so the rows
say how much RTP was planned (``rtp_packets_per_call`` x successful calls).
"""

from __future__ import annotations

import math
from typing import Any

from nest_experiments.errors import RunError

FIELDS = ("app", "src", "dst", "rate_cps", "call_length_s", "calls_planned", "calls_attempted",
          "calls_successful", "calls_failed", "success_ratio", "response_time_mean_ms", "response_time_p95_ms",
          "response_time_max_ms", "response_time_samples", "call_length_mean_s", "call_rate_cps",
          "retransmissions", "failed_max_udp_retrans", "failed_timeout_on_recv", "failed_unexpected_msg",
          "elapsed_s", "rtp_packets_per_call", "rtp_packets_planned")


def parse_stat(text: str, *, what: str, delimiter: str = ";") -> dict[str, str]:
    """The last complete row of a ``-trace_stat`` file as {column: value}."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        raise RunError(f"{what}: sipp wrote no statistics row ({len(lines)} lines)")
    header = lines[0].rstrip(delimiter).split(delimiter)
    for line in reversed(lines[1:]):
        values = line.rstrip(delimiter).split(delimiter)
        if len(values) >= len(header) and values[0] != header[0]:
            return dict(zip(header, values, strict=False))
    raise RunError(f"{what}: no complete statistics row")


def duration_s(text: str) -> float:
    """``"00:00:02:008000"`` (HH:MM:SS:microseconds) -> 2.008; ``"00:00:07"`` -> 7.0."""
    parts = text.strip().split(":")
    if len(parts) not in (3, 4) or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a sipp duration: {text!r}")
    h, m, s, us = (int(p) for p in [*parts, "0"][:4])
    return h * 3600 + m * 60 + s + us / 1e6


def parse_rtt(text: str, *, rtd: int = 1) -> list[float]:
    """Response times (ms) of the ``rtd`` mark ``rtd`` from a ``-trace_rtt`` file."""
    times = []
    for line in text.splitlines()[1:]:
        cols = line.strip().split(";")
        if len(cols) >= 3 and cols[2].strip() == str(rtd):
            try:
                times.append(float(cols[1]))
            except ValueError:
                continue
    return times


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary_row(stat: dict[str, str], rtts: list[float], *, app: str, src: str, dst: str, rate_cps: float,
                call_length_s: float, calls_planned: int, rtp_packets_per_call: int) -> dict[str, Any]:
    """One ``sipp.csv`` row from the last ``-trace_stat`` row and the ``-trace_rtt`` times."""

    def count(name: str) -> int:
        return int(stat.get(f"{name}(C)", "0") or 0)

    attempted = count("OutgoingCall")
    ok, failed = count("SuccessfulCall"), count("FailedCall")
    if rtts:
        mean_ms: Any = round(sum(rtts) / len(rtts), 3)
        p95_ms: Any = percentile(rtts, 95)
        max_ms: Any = max(rtts)
    else:  # no per-call trace: sipp's own cumulative mean (ms resolution), if any call got its 200 OK
        mean_ms = round(duration_s(stat["ResponseTime1(C)"]) * 1000, 3) if ok and stat.get("ResponseTime1(C)") else ""
        p95_ms = max_ms = ""
    return {
        "app": app, "src": src, "dst": dst, "rate_cps": rate_cps, "call_length_s": call_length_s,
        "calls_planned": calls_planned, "calls_attempted": attempted, "calls_successful": ok, "calls_failed": failed,
        "success_ratio": round(ok / attempted, 4) if attempted else 0.0,
        "response_time_mean_ms": mean_ms, "response_time_p95_ms": p95_ms, "response_time_max_ms": max_ms,
        "response_time_samples": len(rtts),
        "call_length_mean_s": round(duration_s(stat["CallLength(C)"]), 3) if stat.get("CallLength(C)") else "",
        "call_rate_cps": float(stat.get("CallRate(C)", "0") or 0),
        "retransmissions": count("Retransmissions"), "failed_max_udp_retrans": count("FailedMaxUDPRetrans"),
        "failed_timeout_on_recv": count("FailedTimeoutOnRecv"), "failed_unexpected_msg": count("FailedUnexpectedMessage"),
        "elapsed_s": _elapsed_s(stat),
        "rtp_packets_per_call": rtp_packets_per_call, "rtp_packets_planned": rtp_packets_per_call * ok,
    }


def _epoch(text: str) -> float:
    """``"2026-11-22\t01:50:59.654976\t1795312259.654976"`` -> 1795312259.654976."""
    return float(text.split()[-1])


def _elapsed_s(stat: dict[str, str]) -> Any:
    try:
        return round(_epoch(stat["CurrentTime"]) - _epoch(stat["StartTime"]), 3)
    except (KeyError, ValueError, IndexError):
        return ""
