"""``ss -tinH`` output -> one dict per TCP socket (MPTCP subflows are TCP sockets).

A socket is a line that starts at column 0 (state, queues, local and peer
``addr:port``, the local one as ``addr%dev:port`` when bound to a device, as
MPTCP subflows from an endpoint with ``dev`` are) followed by indented lines with ``tcp_info`` fields such as
``bytes_sent:``, ``bytes_acked:``, ``bytes_received:`` and, for a subflow of
an MPTCP connection, ``tcp-ulp-mptcp``. ``ss`` reads them through inet_diag
(``INET_DIAG_INFO``: the kernel's ``struct tcp_info``), and prints them as
iproute2's ``ss.c`` does (``tcp_show_info``): the option words ``ts sack ecn
ecnseen`` first, ``rtt:SRTT/RTTVAR`` in ms, ``cwnd:`` and ``ssthresh:`` in
segments, ``pacing_rate Nbps`` and ``delivery_rate Nbps`` (``-n``: plain bit/s),
``retrans:NOW/TOTAL``, ``lost:``.
"""

from __future__ import annotations

import re
from typing import Any

_ENDPOINT = re.compile(r"^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)|\*)(?:%[^:\s]+)?:(\d+|\*)$")  # addr%dev: bound to dev
_COUNTER = re.compile(r"\b(bytes_sent|bytes_acked|bytes_received|bytes_retrans|segs_out|segs_in):(\d+)")
_RTT = re.compile(r"\brtt:([0-9.]+)/([0-9.]+)")
_SEGMENTS = re.compile(r"\b(cwnd|ssthresh|lost|unacked):(\d+)")
_RATE = re.compile(r"\b(pacing_rate|delivery_rate) ([0-9.]+)bps")
_RETRANS = re.compile(r"\bretrans:\d+/(\d+)")  # the in-flight retransmits / tcpi_total_retrans
_FLAG = re.compile(r"(?<!\S)(ecn|ecnseen)(?!\S)")  # TCPI_OPT_ECN (negotiated) / TCPI_OPT_ECN_SEEN (a CE seen)
STATE_FIELDS = ("cwnd", "ssthresh", "rttvar_ms", "pacing_rate_bps", "delivery_rate_bps", "retrans_total", "lost",
                "unacked", "ecn", "ecnseen")  # a socket's tcp_info beyond its counters (None where ss left it out)
# ss prints these only when not zero (retrans when either count is, lost, unacked) or set (the option words)
ZERO_WHEN_ABSENT = {"retrans_total": 0, "lost": 0, "unacked": 0, "ecn": False, "ecnseen": False}


def _endpoints(line: str) -> tuple[str, int, str, int] | None:
    found = []
    for token in line.split():
        m = _ENDPOINT.match(token)
        if m and (m.group(1) or m.group(2)) and m.group(3) != "*":
            found.append(((m.group(1) or m.group(2)), int(m.group(3))))
    if len(found) < 2:
        return None
    (laddr, lport), (raddr, rport) = found[-2], found[-1]
    return laddr, lport, raddr, rport


def tcp_sockets(text: str) -> list[dict[str, Any]]:
    """Every socket in ``text`` with its endpoints, byte counters, RTT, its congestion state (:data:`STATE_FIELDS`)
    and whether it is an MPTCP subflow."""
    sockets: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            ends = _endpoints(line)
            if ends is None:
                continue
            laddr, lport, raddr, rport = ends
            sockets.append({"local": laddr, "local_port": lport, "remote": raddr, "remote_port": rport,
                            "bytes_sent": 0, "bytes_acked": 0, "bytes_received": 0, "bytes_retrans": 0,
                            "segs_out": 0, "segs_in": 0, "rtt_ms": None, "mptcp": False,
                            **dict.fromkeys(STATE_FIELDS), **ZERO_WHEN_ABSENT})
        elif sockets:
            sock = sockets[-1]
            for key, value in _COUNTER.findall(line):
                sock[key] = int(value)
            if m := _RTT.search(line):
                sock["rtt_ms"], sock["rttvar_ms"] = float(m.group(1)), float(m.group(2))
            for key, value in _SEGMENTS.findall(line):
                sock[key] = int(value)
            for key, value in _RATE.findall(line):
                sock[f"{key}_bps"] = float(value)
            if m := _RETRANS.search(line):
                sock["retrans_total"] = int(m.group(1))
            for flag in _FLAG.findall(line):
                sock[flag] = True
            if "tcp-ulp-mptcp" in line:
                sock["mptcp"] = True
    return sockets
