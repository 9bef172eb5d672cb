"""SIPp VoIP calls with RTP: ``sipp.csv`` (one row per app).

The server is ``sipp -sn uas -rtp_echo`` on ``dst`` (answers every INVITE,
echoes each RTP packet back to its sender); the client plays our scenario
``sipp_uac_rtp.xml`` (SIPp's ``uac_pcap`` message flow) at ``rate`` calls/s
and stops after :func:`planned_calls` calls (``-m``). Each call plays
``pcap/g711a.pcap``, which we write for the call length (G.711 A-law, 20 ms
packets), and lasts that long (``-d``). sipp resolves the pcap relative to
its working directory: both ends run in ``raw/<app>.sipp/{client,server}/``
of the run folder, which is writable on the host and in the VM guest.
"""

from __future__ import annotations

import functools
import math
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nest_experiments.apps.base import App, tool_version
from nest_experiments.config import SippApp
from nest_experiments.net.procs import require_tool, stop
from nest_experiments.parsers import sipp as parse
from nest_experiments.rundir import CLIENT, LOG, SERVER, SIPP, SIPP_DIR, app_file

SCENARIO = Path(__file__).with_name("sipp_uac_rtp.xml")
PTIME_S = 0.02  # 20 ms of audio per RTP packet
PAYLOAD_BYTES = 160  # G.711 at 8 kHz: 8 bytes per ms
PCMA = 8  # RTP payload type of G.711 A-law
ALAW_SILENCE = 0xD5


def rtp_packets(call_length_s: float) -> int:
    return max(1, round(call_length_s / PTIME_S))


def planned_calls(*, rate: float, call_length_s: float, start_s: float, run_s: float, length_s: float | None) -> int:
    """How many calls the client places (``-m``), one every ``1 / rate`` s from ``start_s``.

    ``length_s`` given (the app's ``duration``): the calls that start within it, ``rate x length``. None (until
    the run ends): the calls that also end by then, the last starting ``call_length_s`` before the run's end, so
    that no call outlasts the other traffic (they used to: the run waited ~2.7 s after its end for SIPp's last
    call; 63 calls instead of 64 at 1/s from 1 s in a 65 s run). At least one."""
    if length_s is not None:
        return max(1, round(rate * length_s))
    return max(1, math.floor((run_s - start_s - call_length_s) * rate + 1e-9) + 1)


def g711_pcap(call_length_s: float) -> bytes:
    """A pcap (Ethernet/IPv4/UDP/RTP) of ``call_length_s`` of G.711 A-law, one packet per 20 ms.

    sipp's ``play_pcap_audio`` replays the UDP payloads with the pcap's
    timing, from its media port to the port in the peer's SDP; the addresses
    and ports written here are placeholders.
    """
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]  # pcap header, Ethernet
    for i in range(rtp_packets(call_length_s)):
        marker = 0x80 if i == 0 else 0
        rtp = struct.pack("!BBHII", 0x80, marker | PCMA, i & 0xFFFF, (i * PAYLOAD_BYTES) & 0xFFFFFFFF, 0x4E455354)
        rtp += bytes([ALAW_SILENCE]) * PAYLOAD_BYTES
        udp = struct.pack("!HHHH", 6000, 6000, 8 + len(rtp), 0) + rtp
        ip = _ipv4_header(len(udp), ident=i & 0xFFFF) + udp
        frame = bytes.fromhex("020000000002" "020000000001" "0800") + ip
        t_us = round(i * PTIME_S * 1e6)
        out.append(struct.pack("<IIII", t_us // 1_000_000, t_us % 1_000_000, len(frame), len(frame)) + frame)
    return b"".join(out)


def _ipv4_header(payload_len: int, *, ident: int) -> bytes:
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0xB8, 20 + payload_len, ident, 0x4000, 64, 17, 0,
                         bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))  # DSCP EF, DF, TTL 64, UDP
    total = sum(struct.unpack("!10H", header))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return header[:10] + struct.pack("!H", ~total & 0xFFFF) + header[12:]


class Sipp(App):
    cfg: SippApp

    @property
    def work_dir(self) -> Path:
        return self.raw_dir / app_file(self.cfg.name, SIPP_DIR)

    @property
    def calls(self) -> int:
        c = self.cfg
        return planned_calls(rate=c.rate, call_length_s=c.call_length_s, start_s=c.start_s, run_s=self.run_duration_s,
                             length_s=c.duration_s)

    @property
    def timer_slack_ns(self) -> int:
        return round(self.cfg.timer_slack_s * 1e9)

    def _trace_args(self, stat_file: str) -> list[str]:
        return ["-nostdin", "-trace_stat", "-stf", stat_file, "-fd", "1", "-trace_rtt", "-rtt_freq", "1",
                "-trace_counts"]

    def prepare(self) -> None:
        require_tool("sipp", "sip-tester")
        self.versions["sipp"] = tool_version(["sipp", "-v"])
        c = self.cfg
        for sub in ("client/pcap", "server"):
            (self.work_dir / sub).mkdir(parents=True, exist_ok=True)
        (self.work_dir / "client/pcap/g711a.pcap").write_bytes(g711_pcap(c.call_length_s))
        addr = self.net.addr(c.dst)
        argv = ["sipp", "-sn", "uas", "-rtp_echo", "-i", addr, "-p", str(c.port), "-mi", addr,
                "-mp", str(c.media_port), *self._trace_args("uas_stat.csv")]
        self.server = self.spawn(c.dst, argv, log=app_file(c.name, SERVER, LOG), cwd=self.work_dir / "server",
                                 timer_slack_ns=self.timer_slack_ns)
        for port in (c.port, c.media_port):
            self.when_ready(functools.partial(self.wait_listening, c.dst, port, proto="udp", proc=self.server))

    def start(self) -> None:
        c = self.cfg
        addr = self.net.addr(c.src)
        argv = ["sipp", f"{self.net.addr(c.dst)}:{c.port}", "-sf", str(SCENARIO), "-i", addr, "-p", str(c.port),
                "-mi", addr, "-mp", str(c.media_port), "-r", f"{c.rate:g}", "-m", str(self.calls),
                "-d", str(round(c.call_length_s * 1000)), *self._trace_args("uac_stat.csv")]
        self.t_start = self.clock()
        self.client = self.spawn(c.src, argv, log=app_file(c.name, CLIENT, LOG), cwd=self.work_dir / "client",
                                 timer_slack_ns=self.timer_slack_ns)

    def finish(self, deadline: float) -> None:
        c = self.cfg
        # with a duration, the last calls start at its end and last call_length_s more
        if not self._wait(self.client, deadline + c.call_length_s):
            self.warnings.append(f"apps.{c.name}: sipp client still had calls up at the deadline: stopped")
        code = self.client.returncode
        stop(self.server)  # sipp quits on SIGTERM and writes its last statistics row
        stat_file = self.work_dir / "client/uac_stat.csv"
        what = f"apps.{c.name} (sipp client exit {code}, see {self.work_dir})"
        stat = parse.parse_stat(stat_file.read_text() if stat_file.exists() else "", what=what)
        rtts = [t for f in sorted((self.work_dir / "client").glob("*_rtt.csv")) for t in parse.parse_rtt(f.read_text())]
        row = parse.summary_row(stat, rtts, app=c.name, src=c.src, dst=c.dst, rate_cps=c.rate,
                                call_length_s=c.call_length_s, calls_planned=self.calls,
                                rtp_packets_per_call=rtp_packets(c.call_length_s))
        self.rows = [row]
        if row["calls_attempted"] < self.calls:
            self.warnings.append(f"apps.{c.name}: sipp placed {row['calls_attempted']} of {self.calls} calls")
        if row["calls_failed"]:
            self.warnings.append(f"apps.{c.name}: {row['calls_failed']} of {row['calls_attempted']} calls failed")

    def _wait(self, proc: subprocess.Popen[bytes], deadline: float) -> bool:
        """Wait until ``deadline`` on the run clock; then SIGTERM (sipp writes its statistics and quits)."""
        try:
            proc.wait(timeout=max(0.1, deadline - self.clock()))
            return True
        except subprocess.TimeoutExpired:
            stop(proc)
            return False

    def outputs(self) -> dict[str, tuple[Sequence[str], list[dict[str, Any]]]]:
        return {SIPP: (parse.FIELDS, getattr(self, "rows", []))}
