"""DASH player (and server) CPU seconds per minute of media, per transport, through a 5 Mbit/s bottleneck.

For each transport the server (``nest_experiments.dash.origin.server``) runs on ``s1``
and the player (``nest_experiments.dash.players.client``) on ``h1`` of the dumbbell,
whose bottleneck is an HTB link of ``--rate`` (default 5 Mbit/s) both ways.
Every transport streams the same content: ``--clip`` seconds of the
``abr_quic_tcp`` ladder pinned to one video level (``--video-kbps``, default
4000: the highest that fits 5 Mbit/s) plus the 128 kbit/s audio, so the ABR
has no choice and the bytes are the same. Player CPU is the child's own
resource usage (``wait4``: utime + stime, process start-up and imports
included); server CPU is its ``/proc/<pid>/stat`` utime + stime from the
player's start to its exit. Printed: one row per transport with the CPU
seconds and the CPU seconds per minute of media. ``--http-server caddy``
serves the content with Caddy instead (configured as the DASH app does; its
CPU is read the same way); over h3 the player runs once per QUIC stack of
``--h3-clients`` (default: qh3 and aioquic). Needs root.

    sudo .venv/bin/python bench/player_cpu.py [--clip 60] [--rate 5mbit] [--video-kbps 4000] [--kinds tcp,h3] \
        [--http-server nest|caddy] [--h3-clients qh3,aioquic]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from nest_experiments.config import parse_experiment
from nest_experiments.dash.content import media
from nest_experiments.net.network import Network
from nest_experiments.net.procs import RunState, clean_dead_runs, new_prefix, popen_in_ns, run_lock, stop

KINDS = ("tcp", "mptcp", "h2", "h3")
CADDY_PORT = 8443
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Figures:
    kind: str
    client: str
    media_s: float
    megabytes: float
    video_kbps: float
    wall_s: float
    stalls: int
    client_cpu_s: float
    server_cpu_s: float
    client_sys_s: float  # of client_cpu_s: in the kernel (per-packet work shows here)
    server_sys_s: float

    def per_media_minute(self, cpu_s: float) -> float:
        return cpu_s * 60 / self.media_s


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(utime + stime, stime) of a live process, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK, int(fields[12]) / TICK


def pinned_ladder(video_bps: int) -> media.Ladder:
    """``abr_quic_tcp`` with one video level (``video_bps``) and its highest audio level."""
    ladder = media.load_ladder("abr_quic_tcp")
    top = ladder.video.levels[-1]
    return replace(ladder, name=f"{ladder.name}_pinned",
                   video=replace(ladder.video, levels=(replace(top, bitrate_bps=video_bps),)),
                   audio=replace(ladder.audio, levels=ladder.audio.levels[-1:]))  # fmt: skip


def python_in(net: Network, node: str, argv: list[str], *, stdout: int, err: Path) -> subprocess.Popen[bytes]:
    """``python -m ...`` in ``node``; ``ip netns exec`` execs it, so the pid is the Python process."""
    with err.open("wb") as fh:
        proc = popen_in_ns(net.ns(node), [sys.executable, "-m", *argv], stdout=stdout, stderr=fh)
    deadline = time.monotonic() + 5.0
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0] == os.fsencode(sys.executable):
                return proc
        time.sleep(0.01)
    if proc.poll() is None:
        stop(proc)
        raise SystemExit(f"pid {proc.pid} did not become {sys.executable}: its CPU would not be the player's")
    return proc  # exited already: its error shows when it is waited for


def start_server(net: Network, root: Path, kind: str, work: Path, t0: float) -> tuple[subprocess.Popen[bytes], int]:
    argv = ["nest_experiments.dash.origin.server", "--root", str(root), "--bind", net.addr("s1"), f"--port-{kind}", "0",
            "--t0", repr(t0), "--ca-out", str(work / f"{kind}.ca.pem")]
    proc = python_in(net, "s1", argv, stdout=subprocess.PIPE, err=work / f"{kind}.server.err")
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], 20.0)
    ready = json.loads((proc.stdout.readline() if readable else b"") or b"{}")
    if not ready.get("ready"):
        stop(proc)
        raise SystemExit(f"server for {kind} did not start: {(work / f'{kind}.server.err').read_text()}")
    return proc, int(ready["ports"][kind])


def start_caddy(net: Network, root: Path, kind: str, work: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Caddy on s1 as the DASH app configures it; ``ip netns exec`` and ``env`` exec it: the pid is Caddy's."""
    from nest_experiments.dash.origin import caddy, certs

    home = work / f"{kind}.caddy"
    home.mkdir()
    files = certs.write_certs(home, [net.addr("s1")])
    (work / f"{kind}.ca.pem").write_bytes(files.ca.read_bytes())
    conf = caddy.config(root=root.resolve(), addr=net.addr("s1"), port=CADDY_PORT, transport=kind,
                        access_log=home / "access.json", storage=home / "storage", chain=files.chain, key=files.key)
    (home / "caddy.json").write_text(json.dumps(conf))
    env = [f"HOME={home}", f"XDG_CONFIG_HOME={home}", f"XDG_DATA_HOME={home}", "GOMAXPROCS=1"]
    with (work / f"{kind}.caddy.err").open("wb") as err:
        proc = popen_in_ns(net.ns("s1"), ["env", *env, caddy.binary(), "run", "--config", str(home / "caddy.json")],
                           stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline and proc.poll() is None:
        out = subprocess.run(["ip", "netns", "exec", net.ns("s1"), "ss", "-Hltn", "sport", "=", f":{CADDY_PORT}"],
                             capture_output=True, text=True, check=False).stdout
        if out.strip():
            return proc, CADDY_PORT
        time.sleep(0.05)
    stop(proc)
    raise SystemExit(f"caddy for {kind} did not start: {(work / f'{kind}.caddy.err').read_text()}")


def play(net: Network, mpd: Path, kind: str, port: int, work: Path, t0: float, clip_s: float,
         h3_client: str) -> tuple[int, float, float]:
    """Run the player to the end; return (exit code, its CPU seconds, of which in the kernel), children included."""
    argv = ["nest_experiments.dash.players.client", "--server", net.addr("s1"), "--port", str(port), "--transport", kind,
            "--mpd", f"/{mpd.name}", "--abr", "grate", "--abr-audio", "grate", "--t0", repr(t0),
            "--out", str(work / f"{kind}.client"), "--max-duration", f"{clip_s + 60:g}", "--h3-client", h3_client]
    if kind in ("h2", "h3"):
        argv += ["--ca", str(work / f"{kind}.ca.pem")]
    client = python_in(net, "h1", argv, stdout=subprocess.DEVNULL, err=work / f"{kind}.client.err")
    _, status, usage = os.wait4(client.pid, 0)
    client.returncode = os.waitstatus_to_exitcode(status)
    return client.returncode, usage.ru_utime + usage.ru_stime, usage.ru_stime


def measure(net: Network, mpd: Path, kind: str, work: Path, clip_s: float, *, http_server: str,
            h3_client: str) -> Figures:
    t0 = time.monotonic()
    for old in work.glob(f"{kind}.*"):  # the previous h3 client's
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    if http_server == "caddy":
        server, port = start_caddy(net, mpd.parent, kind, work)
    else:
        server, port = start_server(net, mpd.parent, kind, work, t0)
    try:
        (srv0, srv_sys0), wall0 = cpu_seconds(server.pid), time.monotonic()
        code, client_cpu, client_sys = play(net, mpd, kind, port, work, t0, clip_s, h3_client)
        (srv1, srv_sys1), wall = cpu_seconds(server.pid), time.monotonic() - wall0
    finally:
        stop(server)
    if code != 0:
        raise SystemExit(f"{kind}: player exited {code}: {(work / f'{kind}.client.err').read_text().strip()}")
    out = work / f"{kind}.client"
    with (out / "segments.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    doc = json.loads((out / "qoe.json").read_text())
    if doc["end_reason"] != "ended":
        raise SystemExit(f"{kind}: playback did not reach the end ({doc['end_reason']})")
    video = [int(r["bitrate_bps"]) for r in rows if r["stream"] == "video"]
    return Figures(kind, str(doc.get("client", "")), clip_s, sum(int(r["bytes"]) for r in rows) / 1e6, sum(video) / len(video) / 1e3, wall,
                   int(doc["stalls"]), client_cpu, srv1 - srv0, client_sys, srv_sys1 - srv_sys0)


def report(figures: list[Figures], rate: str, http_server: str) -> None:
    print(f"bottleneck {rate} (HTB, both ways), server {http_server}; CPU seconds, and per minute of media; "
          "MB per player CPU second; sys: the share of the CPU seconds spent in the kernel")
    print(f"{'transport':9} {'player':16} {'media s':>7} {'MB':>6} {'video kb/s':>10} {'wall s':>7} {'stalls':>6} "
          f"{'player CPU s':>12} {'sys':>5} {'/media-min':>10} {'server CPU s':>12} {'sys':>5} {'/media-min':>10} "
          f"{'MB/player-CPU-s':>15}")  # fmt: skip
    for f in figures:
        print(f"{f.kind:9} {f.client:16} {f.media_s:7.0f} {f.megabytes:6.1f} {f.video_kbps:10.0f} {f.wall_s:7.1f} {f.stalls:6d} "
              f"{f.client_cpu_s:12.2f} {f.client_sys_s / f.client_cpu_s:5.0%} {f.per_media_minute(f.client_cpu_s):10.2f} "
              f"{f.server_cpu_s:12.2f} {f.server_sys_s / max(f.server_cpu_s, 1e-9):5.0%} "
              f"{f.per_media_minute(f.server_cpu_s):10.2f} "
              f"{f.megabytes / f.client_cpu_s:15.2f}")  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clip", type=float, default=60.0, help="seconds of media per transport")
    p.add_argument("--rate", default="5mbit", help="bottleneck rate")
    p.add_argument("--video-kbps", type=int, default=4000, help="the one video level")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--http-server", choices=("nest", "caddy"), default="nest", help="the origin's software")
    p.add_argument("--h3-clients", default="qh3,aioquic", help="the player's QUIC stacks to compare over h3")
    args = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    kinds = args.kinds.split(",")
    exp = parse_experiment({"experiment": {"name": "player_cpu", "topology": "dumbbell", "duration": "1s"},
                            "links": {"bottleneck": {"rate": args.rate}}})  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="nxt-bench-") as tmp:
        work = Path(tmp)
        mpd = media.generate(pinned_ladder(args.video_kbps * 1000), work / "media", duration_s=args.clip)
        with run_lock():
            clean_dead_runs()
            with Network(exp.topology, exp.links, state=RunState(prefix=new_prefix())) as net:
                figures = [measure(net, mpd, kind, work, args.clip, http_server=args.http_server, h3_client=client)
                           for kind in kinds if not (kind == "mptcp" and args.http_server == "caddy")
                           for client in (args.h3_clients.split(",") if kind == "h3" else ["qh3"])]
    report(figures, args.rate, args.http_server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
