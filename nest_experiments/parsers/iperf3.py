"""iperf3 ``--json`` output -> rows (pure)."""

from __future__ import annotations

import json
from typing import Any

from nest_experiments.errors import RunError

INTERVAL_FIELDS = ("t", "flow", "src", "dst", "bits_per_second", "retransmits", "snd_cwnd", "rtt_ms")
SUMMARY_FIELDS = ("flow", "src", "dst", "bytes", "seconds", "bits_per_second", "retransmits", "mean_rtt_ms",
                  "receiver_bits_per_second")


def load(text: str, *, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RunError(f"{what}: iperf3 wrote no JSON ({text.strip()[:200]!r})") from exc
    if data.get("error"):
        raise RunError(f"{what}: iperf3 error: {data['error']}")
    return data


def interval_rows(data: dict[str, Any], *, flow_prefix: str, src: str, dst: str, t_offset: float) -> list[dict[str, Any]]:
    """One row per stream per interval; ``t`` is the interval's end on the run clock."""
    rows = []
    for interval in data.get("intervals", []):
        for i, s in enumerate(interval.get("streams", [])):
            rows.append({
                "t": round(t_offset + s["end"], 3), "flow": f"{flow_prefix}.{i}", "src": src, "dst": dst,
                "bits_per_second": round(s["bits_per_second"]), "retransmits": s.get("retransmits", ""),
                "snd_cwnd": s.get("snd_cwnd", ""), "rtt_ms": _ms(s.get("rtt")),
            })
    return rows


def summary_rows(data: dict[str, Any], *, flow_prefix: str, src: str, dst: str) -> list[dict[str, Any]]:
    rows = []
    for i, s in enumerate(data.get("end", {}).get("streams", [])):
        snd, rcv = s.get("sender", {}), s.get("receiver", {})
        rows.append({
            "flow": f"{flow_prefix}.{i}", "src": src, "dst": dst, "bytes": snd.get("bytes", 0),
            "seconds": round(snd.get("seconds", 0.0), 3), "bits_per_second": round(snd.get("bits_per_second", 0)),
            "retransmits": snd.get("retransmits", ""), "mean_rtt_ms": _ms(snd.get("mean_rtt")),
            "receiver_bits_per_second": round(rcv.get("bits_per_second", 0)),
        })
    return rows


def _ms(us: Any) -> Any:
    return round(us / 1000.0, 3) if isinstance(us, (int, float)) else ""
