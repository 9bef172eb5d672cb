"""httperf's end-of-test summary (stdout) -> one row per app (pure).

httperf 0.9.0 prints, after the test, lines such as::

    Total: connections 75 requests 75 replies 75 test-duration 4.962 s
    Request rate: 15.1 req/s (66.2 ms/req)
    Reply rate [replies/s]: min 0.0 avg 0.0 max 0.0 stddev 0.0 (0 samples)
    Reply time [ms]: response 6.2 transfer 3.5
    Errors: total 0 client-timo 0 socket-timo 0 connrefused 0 connreset 0

``Reply rate`` is sampled every 5 s: a test shorter than that has no
samples, and its ``reply_rate_avg`` is left empty rather than 0.
``reply_time_ms`` is httperf's "response" time (request sent -> first byte
of the reply), ``transfer_time_ms`` first -> last byte.
"""

from __future__ import annotations

import re
from typing import Any

from nest_experiments.errors import RunError

FIELDS = ("app", "src", "dst", "rate_target", "connections", "request_rate", "requests", "replies",
          "reply_ratio", "reply_rate_avg", "reply_rate_min", "reply_rate_max", "reply_rate_samples",
          "reply_time_ms", "transfer_time_ms", "connection_time_avg_ms", "connection_time_median_ms",
          "connection_time_max_ms", "reply_content_bytes", "status_2xx", "errors_total", "errors_client_timeout",
          "errors_connrefused", "errors_connreset", "errors_other", "test_duration_s", "net_io_bps", "cpu_pct")

_NUM = r"([-+]?\d+(?:\.\d+)?)"
_PATTERNS: dict[str, str] = {
    "total": rf"^Total: connections {_NUM} requests {_NUM} replies {_NUM} test-duration {_NUM} s",
    "request_rate": rf"^Request rate: {_NUM} req/s",
    "reply_rate": rf"^Reply rate \[replies/s\]: min {_NUM} avg {_NUM} max {_NUM} stddev {_NUM} \({_NUM} samples\)",
    "reply_time": rf"^Reply time \[ms\]: response {_NUM} transfer {_NUM}",
    "conn_time": rf"^Connection time \[ms\]: min {_NUM} avg {_NUM} max {_NUM} median {_NUM}",
    "reply_size": rf"^Reply size \[B\]: header {_NUM} content {_NUM}",
    "status": rf"^Reply status: 1xx={_NUM} 2xx={_NUM} 3xx={_NUM} 4xx={_NUM} 5xx={_NUM}",
    "errors": rf"^Errors: total {_NUM} client-timo {_NUM} socket-timo {_NUM} connrefused {_NUM} connreset {_NUM}",
    "errors2": rf"^Errors: fd-unavail {_NUM} addrunavail {_NUM} ftab-full {_NUM} other {_NUM}",
    "cpu": rf"^CPU time \[s\]: user {_NUM} system {_NUM} \(user {_NUM}% system {_NUM}% total {_NUM}%\)",
    "net_io": rf"^Net I/O: {_NUM} KB/s \({_NUM}\*10\^6 bps\)",
}


def parse_summary(text: str, *, what: str) -> dict[str, tuple[float, ...]]:
    """Every known summary line found -> its numbers; a missing ``Total:`` line is an error."""
    found: dict[str, tuple[float, ...]] = {}
    for key, pattern in _PATTERNS.items():
        m = re.search(pattern, text, flags=re.MULTILINE)
        if m:
            found[key] = tuple(float(g) for g in m.groups())
    if "total" not in found:
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise RunError(f"{what}: httperf printed no summary ({tail[:200]!r})")
    return found


def summary_row(text: str, *, what: str, app: str, src: str, dst: str, rate_target: float) -> dict[str, Any]:
    """One ``httperf.csv`` row; fields httperf did not print are left empty."""
    s = parse_summary(text, what=what)
    connections, requests, replies, duration = s["total"]

    def pick(key: str, i: int, *, integer: bool = False) -> Any:
        if key not in s:
            return ""
        return int(s[key][i]) if integer else s[key][i]

    samples = pick("reply_rate", 4, integer=True)
    return {
        "app": app, "src": src, "dst": dst, "rate_target": rate_target, "connections": int(connections),
        "request_rate": pick("request_rate", 0), "requests": int(requests), "replies": int(replies),
        "reply_ratio": round(replies / requests, 4) if requests else 0.0,
        "reply_rate_avg": pick("reply_rate", 1) if samples else "",
        "reply_rate_min": pick("reply_rate", 0) if samples else "",
        "reply_rate_max": pick("reply_rate", 2) if samples else "",
        "reply_rate_samples": samples,
        "reply_time_ms": pick("reply_time", 0) if replies else "",
        "transfer_time_ms": pick("reply_time", 1) if replies else "",
        "connection_time_avg_ms": pick("conn_time", 1), "connection_time_median_ms": pick("conn_time", 3),
        "connection_time_max_ms": pick("conn_time", 2), "reply_content_bytes": pick("reply_size", 1),
        "status_2xx": pick("status", 1, integer=True), "errors_total": pick("errors", 0, integer=True),
        "errors_client_timeout": pick("errors", 1, integer=True), "errors_connrefused": pick("errors", 3, integer=True),
        "errors_connreset": pick("errors", 4, integer=True), "errors_other": pick("errors2", 3, integer=True),
        "test_duration_s": duration, "net_io_bps": round(s["net_io"][1] * 1e6) if "net_io" in s else "",
        "cpu_pct": pick("cpu", 4),
    }
