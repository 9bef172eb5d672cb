"""``ss -tinH`` output -> one dict per TCP socket (MPTCP subflows are TCP sockets).

A socket is a line that starts at column 0 (state, queues, local and peer
``addr:port``, the local one as ``addr%dev:port`` when bound to a device, as
MPTCP subflows from an endpoint with ``dev`` are) followed by indented lines with ``tcp_info`` fields such as
``bytes_sent:``, ``bytes_acked:``, ``bytes_received:`` and, for a subflow of
an MPTCP connection, ``tcp-ulp-mptcp``.
"""

from __future__ import annotations

import re
from typing import Any

_ENDPOINT = re.compile(r"^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)|\*)(?:%[^:\s]+)?:(\d+|\*)$")  # addr%dev: bound to dev
_COUNTER = re.compile(r"\b(bytes_sent|bytes_acked|bytes_received|bytes_retrans|segs_out|segs_in):(\d+)")
_RTT = re.compile(r"\brtt:([0-9.]+)/([0-9.]+)")


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
    """Every socket in ``text`` with its endpoints, byte counters, RTT and whether it is an MPTCP subflow."""
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
                            "segs_out": 0, "segs_in": 0, "rtt_ms": None, "mptcp": False})
        elif sockets:
            sock = sockets[-1]
            for key, value in _COUNTER.findall(line):
                sock[key] = int(value)
            if m := _RTT.search(line):
                sock["rtt_ms"] = float(m.group(1))
            if "tcp-ulp-mptcp" in line:
                sock["mptcp"] = True
    return sockets
