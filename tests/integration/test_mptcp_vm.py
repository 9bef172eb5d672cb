"""MPTCP under a lost ADD_ADDR (needs netem for the paths' delay: run pytest with --nest-runtime vm here).

The player learns the server's second address only from the server's
ADD_ADDR. A kernel before 6.18 (the VM's 6.1) resends a lost one after
``net.mptcp.add_addr_timeout``, 120 s by default: a connection whose ADD_ADDR
is lost keeps one path for the whole of a short run. Here r3 drops the first
three ADD_ADDRs on their way to the player (one per connection: MPD, video,
audio), and ``mptcp_add_addr_timeout = "1s"`` must still bring the second
path in. With ``120s`` this test fails in the VM (checked by hand: path 2
carried 788 bytes of 2.9 MB, and the player's kernel counted no join).
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import threading
from pathlib import Path

import pytest

from nest_experiments.config.sweep import expand
from nest_experiments.runs.runner import Run
from tests.integration.mptcp_paths import ns_of, sample_paths

pytestmark = [pytest.mark.vm]
ADD_ADDR_TIMEOUT = "1s"
DROPS = 3


def test_lost_add_addrs_are_resent_in_time(no_leftovers: None, tmp_path: Path) -> None:
    raw = {
        "experiment": {"name": "mptcp_lost_add_addr", "topology": "multihomed_dumbbell", "duration": "40s"},
        "links": {"bn1": {"rate": "2mbit", "reverse": {"delay": "20ms"}},
                  "bn2": {"rate": "2mbit", "reverse": {"delay": "20ms"}}},
        "apps": {"video": {"kind": "dash", "server": "s2", "client": "h2", "transport": "mptcp",
                           "ladder": "abr_quic_tcp", "clip": "20s", "abr": "grate", "start": "2s",
                           "mptcp_add_addr_timeout": ADD_ADDR_TIMEOUT}},
    }
    dropped: list[int] = []
    nft_errors: list[str] = []

    def drop_add_addrs(run: Run) -> None:  # in r3, towards r1: the server's ADD_ADDRs to the player
        nft = ["ip", "netns", "exec", ns_of(run, "r3"), "nft"]
        if not dropped:
            for command in (["add", "table", "inet", "t"],
                            ["add", "chain", "inet", "t", "drops", "{ type filter hook forward priority 0 ; }"],
                            ["add", "rule", "inet", "t", "drops", "oifname", "r1", "tcp", "option", "mptcp", "subtype",
                             "3", "numgen", "inc", "mod", "1000000", "lt", str(DROPS), "counter", "drop"]):
                done = subprocess.run(nft + command, capture_output=True, text=True)
                if done.returncode != 0:
                    nft_errors.append(done.stderr)
                    raise subprocess.CalledProcessError(done.returncode, command)
            dropped.append(0)
        listing = subprocess.run([*nft, "list", "chain", "inet", "t", "drops"], check=True, capture_output=True,
                                 text=True).stdout
        dropped[0] = int(re.search(r"counter packets (\d+)", listing).group(1))  # type: ignore[union-attr]

    paths: dict[str, int] = {}
    (spec,) = expand(raw)
    run = Run(spec, tmp_path / spec.name)
    threading.Thread(target=sample_paths, args=(run, paths, drop_add_addrs), daemon=True).start()
    outcome = run.execute()
    assert outcome.status == "completed", outcome.reason
    run_dir = outcome.run_dir
    assert nft_errors == []
    assert dropped == [DROPS]
    with (run_dir / "segments.csv").open(newline="") as fh:
        stream_bytes = sum(int(row["bytes"]) for row in csv.DictReader(fh))
    assert stream_bytes > 0
    mptcp = json.loads((run_dir / "mptcp.json").read_text())["video"]
    print(f"paths {paths}, stream {stream_bytes} B, counters {mptcp['counters']}")
    assert mptcp["add_addr_timeout_s"] == {"h2": 1, "s2": 1}
    client = mptcp["counters"]["h2"]
    joined, connections = client.get("MPJoinSynAckRx", 0), client.get("MPCapableSYNACKRX", 0)
    assert joined >= connections >= 2, f"{joined} joins for {connections} connections"  # each one got path 2
    assert paths["r2"] >= 0.1 * stream_bytes, f"path via r2 carried {paths['r2']} of {stream_bytes} bytes"
