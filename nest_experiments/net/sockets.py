"""What a namespace's sockets and addresses are doing: ``ss`` and ``ip addr`` reads, as argument lists and waits."""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from nest_experiments.net.procs import in_netns, ns_exec

SIOCGIFADDR, SIOCGIFNETMASK = 0x8915, 0x891B


def established_argv(ns: str, port: int, *, local: bool = False) -> list[str]:
    """``ss -tinH`` of the established TCP sockets to ``port`` in ``ns`` (from ``port`` with ``local``: a server's
    end of its connections); MPTCP subflows and their tcp_info: collectors.subflows."""
    return ns_exec(ns, ["ss", "-tinH", "state", "established", "sport" if local else "dport", "=", f":{port}"])


LISTEN_STATE = {"tcp": "0A", "udp": "07"}  # TCP_LISTEN; an unconnected UDP socket is TCP_CLOSE (7)


def is_listening(ns: str, port: int, *, proto: str = "tcp") -> bool:
    """Whether a socket in ``ns`` listens on ``port`` (``proto`` "tcp" or "udp"), IPv4 or IPv6: the kernel's
    socket tables of that namespace (``/proc/thread-self/net/tcp``, read by this thread inside it), no ``ss``
    process per poll (~0.3 s each under TCG)."""
    tables = []
    with in_netns(ns):
        for name in (proto, f"{proto}6"):
            try:
                tables.append(Path("/proc/thread-self/net", name).read_text())
            except FileNotFoundError:  # no IPv6 in this kernel
                continue
    return any(listening_ports(t, LISTEN_STATE[proto]) & {port} for t in tables)


def listening_ports(table: str, state: str) -> set[int]:
    """Local ports of the sockets in ``state`` in a ``/proc/net/{tcp,udp}[6]`` table (pure)."""
    ports = set()
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == state:
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def wait_addresses_settled(ns: str, timeout_s: float = 10.0) -> None:
    """Wait until ``ns`` has no tentative IPv6 address (DAD done): Chromium treats DAD finishing as a network change
    and aborts every request in flight (ERR_NETWORK_CHANGED), so the browser players start only after it
    (apps.dash)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(ns_exec(ns, ["ip", "-6", "addr", "show", "tentative"]), capture_output=True, text=True,
                             check=False)
        if out.returncode != 0 or not out.stdout.strip():
            return
        time.sleep(0.1)


def ipv4_addresses(ns: str, ifnames: Sequence[str]) -> dict[str, str | None]:
    """Each interface's (first) IPv4 address in ``ns`` as ``a.b.c.d/len``, None when it has none; in-process (an
    ioctl per interface, no ``ip`` process: ~0.3 s each under TCG)."""
    out: dict[str, str | None] = {}
    with in_netns(ns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for name in ifnames:
            out[name] = _ipv4_of(sock, name)
    finally:
        sock.close()
    return out


def _ipv4_of(sock: socket.socket, name: str) -> str | None:
    req = struct.pack("16s16x", name.encode()[:15])
    try:
        addr = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), SIOCGIFADDR, req)[20:24])
        mask = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), SIOCGIFNETMASK, req)[20:24])
    except OSError:  # no such interface (ENODEV) or no IPv4 address (EADDRNOTAVAIL)
        return None
    return f"{addr}/{ipaddress.IPv4Network(f'0.0.0.0/{mask}').prefixlen}"
