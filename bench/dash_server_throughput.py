"""DASH server and client throughput per CPU second, unshaped loopback in a private namespace.

For each transport the server (``nest_experiments.dash.origin.server``, or Caddy with
``--servers caddy``) and the fetcher CLI run in a fresh namespace ``nxt<hex>``;
the client fetches one object repeatedly until ``--total-mb`` have moved.
Over h3 every client of ``--h3-clients`` is measured against every server:
the player's QUIC stacks (``qh3``, ``aioquic``: the fetcher CLI) and, as a
candidate outside the player, ``curl_cffi`` (libcurl + ngtcp2, when
installed). Printed per row: goodput (client view, first request to last
byte), server CPU seconds (utime + stime from /proc while serving), Mbit/s
per server CPU-second, client CPU seconds (the child's rusage, start-up and
imports included) and MB per client CPU-second; then the ratio h3/tcp of
Mbit per server CPU-second. Needs root.

    sudo .venv/bin/python bench/dash_server_throughput.py [--total-mb 200] [--object-mb 20] \
        [--kinds tcp,h3] [--servers nest,caddy] [--h3-clients qh3,aioquic,curl_cffi] [--rate 5mbit]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

KINDS = ("tcp", "mptcp", "h2", "h3")
SERVERS = ("nest", "caddy")
H3_CLIENTS = ("qh3", "aioquic", "curl_cffi")
CADDY_PORT = 8443
TICK = os.sysconf("SC_CLK_TCK")
DATAGRAM = 1200  # QUIC max datagram size, set by --quic-max-datagram


@dataclass(frozen=True)
class Figures:
    kind: str
    server: str
    client: str
    megabytes: float
    wall_s: float
    goodput_mbps: float
    server_cpu_s: float
    client_cpu_s: float

    @property
    def mbit_per_cpu_s(self) -> float:
        return self.megabytes * 8 / self.server_cpu_s if self.server_cpu_s else float("nan")

    @property
    def client_mb_per_cpu_s(self) -> float:
        return self.megabytes / self.client_cpu_s if self.client_cpu_s else float("nan")


def run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def start_server(ns: str, root: Path, kind: str, work: Path) -> tuple[subprocess.Popen[str], int]:
    cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "nest_experiments.dash.origin.server",
           "--root", str(root), "--bind", "127.0.0.1", f"--port-{kind}", "0",
           "--quic-max-datagram", str(DATAGRAM), "--ca-out", str(work / "ca.pem")]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready = json.loads(proc.stdout.readline() or "{}")
    if not ready.get("ready"):
        proc.kill()
        raise SystemExit(f"server for {kind} did not start")
    return proc, int(ready["ports"][kind])


def start_caddy(ns: str, root: Path, kind: str, work: Path) -> tuple[subprocess.Popen[str], int]:
    """Caddy as the DASH app runs it (same configuration, one Go thread); ``ip netns exec`` and ``env`` exec it."""
    from nest_experiments.dash.origin import caddy, certs

    files = certs.write_certs(work, ["127.0.0.1"])
    (work / "ca.pem").write_bytes(files.ca.read_bytes())
    conf = caddy.config(root=root, addr="127.0.0.1", port=CADDY_PORT, transport=kind, access_log=work / "access.json",
                        storage=work / "storage", chain=files.chain, key=files.key)  # fmt: skip
    (work / "caddy.json").write_text(json.dumps(conf))
    env = [f"HOME={work}", f"XDG_CONFIG_HOME={work}", f"XDG_DATA_HOME={work}", "GOMAXPROCS=1"]
    cmd = ["ip", "netns", "exec", ns, "env", *env, caddy.binary(), "run", "--config", str(work / "caddy.json")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn", "sport", "=", f":{CADDY_PORT}"],
                             capture_output=True, text=True, check=False).stdout  # fmt: skip
        if out.strip():
            return proc, CADDY_PORT
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("caddy did not start")


def client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def fetch(ns: str, kind: str, port: int, repeat: int, client: str, ca: Path) -> list[dict[str, float]]:
    if client == "curl_cffi":
        argv = [str(Path(__file__).resolve()), "--curl-fetch", f"https://127.0.0.1:{port}/object.bin"]
    else:
        argv = ["-m", "nest_experiments.dash.http.transports", "--kind", kind, "--host", "127.0.0.1", "--port", str(port),
                "--get", "video=/object.bin", "--quic-max-datagram", str(DATAGRAM)]
        argv += ["--h3-client", client] if kind == "h3" else []
    cmd = ["ip", "netns", "exec", ns, sys.executable, *argv, "--repeat", str(repeat), "--ca", str(ca)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if '"summary"' not in line]


async def curl_fetch(url: str, repeat: int, ca: str) -> None:
    """The ``curl_cffi`` candidate: HTTP/3 only, one session, objects in turn; JSON lines like the fetcher CLI's."""
    from curl_cffi import CurlHttpVersion
    from curl_cffi.requests import AsyncSession

    t0 = time.monotonic()
    async with AsyncSession(verify=ca, http_version=CurlHttpVersion.V3ONLY) as session:  # type: ignore[arg-type]
        for _ in range(repeat):
            t_request, nbytes = time.monotonic() - t0, 0
            response = await session.get(url, stream=True)
            t_first = time.monotonic() - t0
            async for chunk in response.aiter_content():
                nbytes += len(chunk)
            await response.aclose()
            if response.http_version != CurlHttpVersion.V3:
                raise SystemExit(f"curl_cffi used HTTP version {response.http_version}, not 3")
            print(json.dumps({"bytes": nbytes, "t_request": t_request, "t_first_byte": t_first,
                              "t_last_byte": time.monotonic() - t0}), flush=True)  # fmt: skip


def measure(ns: str, root: Path, kind: str, repeat: int, server_name: str, client: str) -> Figures:
    with tempfile.TemporaryDirectory(prefix="nxt-bench-srv-") as tmp:
        work = Path(tmp)
        start = start_caddy if server_name == "caddy" else start_server
        server, port = start(ns, root, kind, work)
        try:
            cpu0, ccpu0, wall0 = cpu_seconds(server.pid), client_cpu(), time.monotonic()
            results = fetch(ns, kind, port, repeat, client, work / "ca.pem")
            wall = time.monotonic() - wall0
            server_cpu, ccpu = cpu_seconds(server.pid) - cpu0, client_cpu() - ccpu0
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
    nbytes = sum(r["bytes"] for r in results)
    span = results[-1]["t_last_byte"] - results[0]["t_request"]
    return Figures(kind, server_name, client, nbytes / 1e6, wall, nbytes * 8 / span / 1e6, server_cpu, ccpu)


def report(figures: list[Figures]) -> None:
    print(f"{'transport':9} {'server':6} {'client':16} {'MB':>6} {'wall s':>7} {'Mbit/s':>8} {'srv CPU s':>9} "
          f"{'Mbit/CPU-s':>10} {'cli CPU s':>9} {'cli MB/CPU-s':>12}")  # fmt: skip
    for f in figures:
        print(f"{f.kind:9} {f.server:6} {f.client:16} {f.megabytes:6.0f} {f.wall_s:7.2f} {f.goodput_mbps:8.1f} "
              f"{f.server_cpu_s:9.2f} {f.mbit_per_cpu_s:10.1f} {f.client_cpu_s:9.2f} {f.client_mb_per_cpu_s:12.1f}")  # fmt: skip
    ours = {f.kind: f for f in figures if f.server == "nest" and f.client in ("nest_experiments", "aioquic")}
    if "h3" in ours and "tcp" in ours:
        ratio = ours["h3"].mbit_per_cpu_s / ours["tcp"].mbit_per_cpu_s
        print(f"our server's efficiency h3/tcp (Mbit per CPU-second): {ratio:.4f} "
              f"(tcp costs {1 / ratio:.0f}x less CPU per bit)")  # fmt: skip


def plan(kinds: list[str], servers: list[str], h3_clients: list[str]) -> list[tuple[str, str, str]]:
    """(transport, server, client) rows: every h3 client against every server; Caddy serves no MPTCP."""
    if "curl_cffi" in h3_clients and "h3" in kinds and importlib.util.find_spec("curl_cffi") is None:
        raise SystemExit("--h3-clients curl_cffi: not installed (a bench-only candidate, not a project dependency): "
                         ".venv/bin/pip install curl_cffi==0.16.3 (the version measured; 0.17.0 needs a newer certifi)")
    rows = []
    for server in servers:
        for kind in kinds:
            if server == "caddy" and kind == "mptcp":
                continue
            for client in h3_clients if kind == "h3" else ["nest_experiments"]:
                rows.append((kind, server, client))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--total-mb", type=int, default=200)
    p.add_argument("--object-mb", type=int, default=20)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--servers", default="nest", help=f"comma-separated, of {SERVERS}")
    p.add_argument("--h3-clients", default="qh3,aioquic", help=f"comma-separated, of {H3_CLIENTS}")
    p.add_argument("--quic-max-datagram", type=int, default=1200)
    p.add_argument("--rate", help="shape the namespace's loopback with TBF at this rate (e.g. 5mbit); default: unshaped")
    p.add_argument("--curl-fetch", metavar="URL", help=argparse.SUPPRESS)  # the curl_cffi client (a child)
    p.add_argument("--repeat", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--ca", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.curl_fetch:
        asyncio.run(curl_fetch(args.curl_fetch, args.repeat, args.ca))
        return 0
    global DATAGRAM
    DATAGRAM = args.quic_max_datagram
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    ns = "nxt" + secrets.token_hex(4)
    with tempfile.TemporaryDirectory(prefix="nxt-bench-") as tmp:
        root = Path(tmp)
        (root / "object.bin").write_bytes(os.urandom(args.object_mb * 1_000_000))
        run("ip", "netns", "add", ns)
        try:
            run("ip", "-n", ns, "link", "set", "lo", "up")
            if args.rate:  # both directions share lo: requests and ACKs go through the same shaper
                run("tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", args.rate, "burst", "16kb",
                    "latency", "100ms")
            repeat = max(1, args.total_mb // args.object_mb)
            rows = plan(args.kinds.split(","), args.servers.split(","), args.h3_clients.split(","))
            report([measure(ns, root, kind, repeat, server, client) for kind, server, client in rows])
        finally:
            subprocess.run(["ip", "netns", "del", ns], check=False, timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
