"""The player under bandwidth changes in real namespaces (host kernel: HTB only).

The DASH server runs on ``s1`` and the player on ``h1`` of the dumbbell; the
test changes the bottleneck's rate mid-stream with
:class:`~nest_experiments.net.rtnl.HtbRates` (the runner's trace player's way: a netlink class
change on both directions' HTB class, read back) and judges the player's ``segments.csv``.
Content: the ``abr_quic_tcp`` ladder (4 s segments, video 200 kbit/s -
4 Mbit/s, audio 64/128 kbit/s), clipped short.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from nest_experiments.dash.content import media
from nest_experiments.dash.core import qoe
from nest_experiments.dash.core.records import SegmentRow, read_segments
from nest_experiments.errors import ConfigError
from nest_experiments.net.procs import stop
from nest_experiments.net.rtnl import HtbRates
from nest_experiments.net.tcplan import parse_htb_classes

if TYPE_CHECKING:  # a module-level import would make pytest try to collect it
    from nest_experiments.pytest_plugin import TestNetwork

pytestmark = pytest.mark.integration

LADDER = "abr_quic_tcp"
SEGMENT_S = 4.0
THRESHOLD_S = 1.0
MBIT = 1_000_000


@dataclass(frozen=True)
class Session:
    rows: list[SegmentRow]
    qoe: dict[str, Any]
    changes: list[tuple[float, float, int]]  # (t before the call, t after it returned, rate)

    def video(self) -> list[SegmentRow]:
        return sorted((r for r in self.rows if r.stream == "video"), key=lambda r: r.index)


def _ready_port(proc: subprocess.Popen[bytes], err: Path) -> int:
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], 20.0)
    line = proc.stdout.readline() if readable else b""
    if not line:
        pytest.fail(f"DASH server did not start: {err.read_text()}")
    return int(json.loads(line)["ports"]["tcp"])


def play(net: TestNetwork, tmp: Path, *, clip_s: float, abr: str, max_buffer_s: float,
         changes: Sequence[tuple[float, int]]) -> Session:  # fmt: skip
    """Stream ``clip_s`` of media from s1 to h1 over tcp; at each (t, rate) set the bottleneck's rate."""
    mpd = media.generate(media.load_ladder(LADDER), duration_s=clip_s)
    out, err = tmp / "client", tmp / "server.err"
    t0 = time.monotonic()
    with err.open("wb") as err_fh:
        server = net.popen("s1", [sys.executable, "-m", "nest_experiments.dash.origin.server", "--root", str(mpd.parent),
                                  "--bind", net.addr("s1"), "--port-tcp", "0", "--t0", repr(t0)], stderr=err_fh)
    try:
        port = _ready_port(server, err)
        client = net.popen("h1", [sys.executable, "-m", "nest_experiments.dash.players.client", "--server", net.addr("s1"),
                                  "--port", str(port), "--transport", "tcp", "--mpd", f"/{mpd.name}", "--abr", abr,
                                  "--max-buffer", f"{max_buffer_s:g}", "--threshold", f"{THRESHOLD_S:g}",
                                  "--t0", repr(t0), "--out", str(out), "--max-duration", f"{clip_s + 60:g}"])
        done = []
        egresses = net.net.rate_egresses("bottleneck", "both")
        with closing(HtbRates(egresses)) as rates:
            for at, rate in changes:
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                before = time.monotonic() - t0
                for egress in egresses:
                    rates.set(egress, rate)
                    assert rates.read(egress).rate_bps == rate
                done.append((before, time.monotonic() - t0, rate))
        try:
            _, client_err = client.communicate(timeout=clip_s + 90)
        finally:
            stop(client)
        assert client.returncode == 0, client_err.decode(errors="replace")
    finally:
        stop(server)
    return Session(read_segments(out / "segments.csv"), json.loads((out / "qoe.json").read_text()), done)


def _htb_rate(net: TestNetwork, node: str) -> int:
    egress = net.egress("bottleneck", node)
    text = net.run(node, ["tc", "class", "show", "dev", egress.dev]).stdout
    return parse_htb_classes(text)[egress.plan.htb_class]


def test_step_from_5_to_1_mbit_goes_below_1_mbit_within_3_segments(no_leftovers: None, nest_network: Any,
                                                                    tmp_path: Path) -> None:  # fmt: skip
    net = nest_network("dumbbell", links={"bottleneck": {"rate": "5mbit"}})
    with pytest.raises(ConfigError, match="no rate to change"):
        net.net.rate_egresses("h1_r1", "both")  # an unshaped link: refused, nothing changed
    s = play(net, tmp_path, clip_s=36, abr="throughput", max_buffer_s=8, changes=[(10.0, MBIT)])
    assert [_htb_rate(net, n) for n in ("r1", "r2")] == [MBIT, MBIT]  # the kernel's view, independently
    (t_before, t_step, _), = s.changes
    video = s.video()
    assert [r.index for r in video] == list(range(9)) and s.qoe["end_reason"] == "ended"
    before = [r for r in video if r.t_request is not None and r.t_request < t_before]
    after = [r for r in video if r.t_request is not None and r.t_request >= t_step]
    kbps = {"before": [r.bitrate_bps // 1000 for r in before], "after": [r.bitrate_bps // 1000 for r in after]}
    (tmp_path / "levels.json").write_text(json.dumps({**kbps, "t_step": t_step}))
    print(f"\nstep at t={t_step:.2f} s; video kbit/s requested before {kbps['before']}, after {kbps['after']}")
    assert before and before[-1].bitrate_bps > MBIT, kbps  # the stream was above 1 Mbit/s at the step
    assert len(after) >= 3, kbps
    first_below = next(i for i, r in enumerate(after) if r.bitrate_bps < MBIT)  # 0: the first segment requested after
    assert first_below < 3, kbps
    assert all(r.bitrate_bps < MBIT for r in after[first_below:]), kbps  # and it stays there at 1 Mbit/s


def test_forced_stall_is_reported_as_the_segment_timings_imply(no_leftovers: None, nest_network: Any,
                                                               tmp_path: Path) -> None:  # fmt: skip
    net = nest_network("dumbbell", links={"bottleneck": {"rate": "3mbit"}})
    outage = (8.0, 18.0)  # 50 kbit/s for 10 s: below the lowest video level alone (200 kbit/s)
    s = play(net, tmp_path, clip_s=32, abr="grate", max_buffer_s=4,
             changes=[(outage[0], 50_000), (outage[1], 3 * MBIT)])
    reported = sum(r.stall_s for r in s.rows)
    implied = qoe.implied_stalls(s.rows, segment_s=SEGMENT_S, threshold_s=THRESHOLD_S)
    implied_s = sum(end - start for start, end in implied)
    (tmp_path / "stalls.json").write_text(json.dumps({"reported_s": reported, "implied": implied,
                                                      "changes": s.changes}))  # fmt: skip
    print(f"\nstall reported {reported:.2f} s in {s.qoe['stalls']} stall(s); "
          f"implied by the segment timings {implied_s:.2f} s: {implied}")
    assert s.qoe["end_reason"] == "ended"
    assert s.qoe["stalls"] >= 1 and reported > 1.0
    assert s.qoe["qoe"]["session"]["stall_s"] == pytest.approx(reported)
    assert reported == pytest.approx(implied_s, rel=0.2)
    t_down, t_up = s.changes[0][0], s.changes[1][1]
    assert any(t_down <= start <= t_up for start, _ in implied)  # the stall began during the outage
