"""What a namespace's sockets and addresses are doing: ``ss`` and ``ip addr`` reads, as argument lists and waits."""

from __future__ import annotations

import subprocess
import time

from nest_experiments.net.procs import check_run, ns_exec


def established_argv(ns: str, dport: int) -> list[str]:
    """``ss -tinH`` of the established TCP sockets to ``dport`` in ``ns`` (MPTCP subflows: collectors.subflows)."""
    return ns_exec(ns, ["ss", "-tinH", "state", "established", "dport", "=", f":{dport}"])


def is_listening(ns: str, port: int, *, proto: str = "tcp") -> bool:
    """Whether a socket in ``ns`` listens on ``port`` (``proto`` "tcp" or "udp")."""
    flag = "-Hltn" if proto == "tcp" else "-Hlun"
    return bool(check_run(ns_exec(ns, ["ss", flag, "sport", "=", f":{port}"]), what="ss").strip())


def wait_addresses_settled(timeout_s: float = 10.0) -> None:
    """Wait until this process's namespace has no tentative IPv6 address: Chromium treats DAD finishing as a
    network change and aborts every request in flight (ERR_NETWORK_CHANGED)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["ip", "-6", "addr", "show", "tentative"], capture_output=True, text=True, check=False)
        if out.returncode != 0 or not out.stdout.strip():
            return
        time.sleep(0.1)
