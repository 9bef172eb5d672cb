"""SIPp VoIP and httperf web traffic through the run command on a dumbbell (any kernel with HTB).

The paper's rates (10 calls/s, 15 GET/s) for 10 s: nearly every call and
request must succeed, the RTP must really flow both ways through the
bottleneck (the server echoes it), httperf must sleep between events (its
select wait library) and stay well under its CPU cap, and
nothing may be left behind: processes, namespaces, cgroups — also when the
run is killed with SIGKILL and a later ``clean`` tidies up.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from nest_experiments.apps import selectwait
from nest_experiments.apps.cpucap import CGROUP_ROOT, find_cpu_controller
from tests.conftest import ROOT, child_processes, cli, our_temp_dirs

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

EXPERIMENT = """
[experiment]
name = "bg"
topology = "dumbbell"
duration = "{duration}"

[links.bottleneck]
rate = "10mbit"

[apps.voip]
kind = "sipp"
src = "h1"
dst = "s1"
rate = 10
call_length = "2s"

[apps.web]
kind = "httperf"
src = "h2"
dst = "s2"
rate = 15
cpu_limit = "20%"
"""

SIPP_FIELDS = {"app", "src", "dst", "calls_attempted", "calls_successful", "calls_failed", "success_ratio",
               "response_time_mean_ms"}
HTTPERF_FIELDS = {"app", "src", "dst", "request_rate", "requests", "replies", "reply_rate_avg", "reply_time_ms",
                  "errors_total", "reply_ratio"}


def our_cgroups() -> list[str]:
    found = [*CGROUP_ROOT.glob("nx*"), *CGROUP_ROOT.glob("*/nx*")]
    return sorted(str(p) for p in found if re.match(r"nx[0-9a-f]{6}-", p.name))


def _experiment(tmp_path: Path, duration: str) -> Path:
    path = tmp_path / "bg.toml"
    path.write_text(EXPERIMENT.format(duration=duration))
    return path


@pytest.fixture(scope="module")
def bg_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("bg")
    cgroups_before = our_cgroups()
    proc = cli("run", str(_experiment(tmp, "10s")), "--runtime", "host", "--no-plot", "--results", str(tmp / "results"))
    assert proc.returncode == 0, proc.stderr
    assert our_cgroups() == cgroups_before, "cgroups left behind"
    return tmp / "results" / "bg" / "r1"


def test_voip_calls_succeed(no_leftovers: None, bg_run: Path) -> None:
    manifest = json.loads((bg_run / "manifest.json").read_text())
    assert manifest["status"] == "completed", manifest.get("reason")
    assert "sipp" in manifest["versions"]
    sipp = pd.read_csv(bg_run / "sipp.csv")
    assert SIPP_FIELDS <= set(sipp.columns)
    (row,) = sipp.to_dict("records")
    # calls that end by the run's end (apps.sipp.planned_calls): one every 0.1 s from 0 to 8.0 s, 2 s each
    assert row["calls_planned"] == 81 and row["calls_attempted"] >= 73
    assert manifest["app_done_t"]["voip"] < 10 + 1.0  # the last call ended with the run (it outlasted it by 2 s)
    assert row["success_ratio"] >= 0.9 and row["calls_successful"] >= 0.9 * row["calls_planned"]
    assert 0 <= row["response_time_mean_ms"] < 100  # an unloaded 10 Mbit/s path
    assert row["call_length_mean_s"] == pytest.approx(2.0, abs=0.3)


def test_rtp_flows_both_ways_through_the_bottleneck(bg_run: Path) -> None:
    (row,) = pd.read_csv(bg_run / "sipp.csv").to_dict("records")
    planned = row["rtp_packets_planned"]  # 100 per successful call
    q = pd.read_csv(bg_run / "qdisc.csv")
    leaf = q[q.kind == "pfifo"]
    sent = {node: int(g.sent_pkts.max() - g.sent_pkts.min()) for node, g in leaf.groupby("node")}
    # SIP and the web traffic add ~2,500 packets per direction: without the RTP (or its echo) the count falls far short
    assert sent["r1"] >= 0.9 * planned, sent  # h1 -> s1: the calls' RTP
    assert sent["r2"] >= 0.9 * planned, sent  # s1 -> h1: the server's echo


def test_web_requests_are_answered_without_busy_polling(bg_run: Path) -> None:
    manifest = json.loads((bg_run / "manifest.json").read_text())
    assert "httperf" in manifest["versions"] and "nginx" in manifest["versions"]
    web = pd.read_csv(bg_run / "httperf.csv", keep_default_na=False)
    assert HTTPERF_FIELDS <= set(web.columns)
    (row,) = web.to_dict("records")
    assert row["connections"] == 150 and row["reply_ratio"] >= 0.9 and row["replies"] >= 0.9 * 150
    assert row["errors_total"] == 0 and row["reply_content_bytes"] == 10240
    assert 0 < float(row["reply_time_ms"]) < 100
    if find_cpu_controller() is not None:
        assert float(row["cpu_limit_pct"]) == 20.0
        # httperf's own figure: busy-polling, it took its whole 20% and was throttled in most 10 ms periods
        assert float(row["cpu_pct"]) < 10.0
        assert float(row["cpu_throttled_ratio"]) < 0.5
    else:
        assert any("without a CPU cap" in w for w in manifest["warnings"])
    assert row["select_wait_us"] == selectwait.WAIT_US
    assert manifest["cpu_mean"] < 0.9, manifest["cpu_mean"]  # httperf alone would take one of two cores
    assert not (bg_run / "raw" / "web.web" / "www").exists()  # the served file lies outside the run folder
    assert not any("-web-" in d or "-selectwait-" in d for d in our_temp_dirs())  # both removed with the run


def test_killed_run_leaves_a_cgroup_that_clean_removes(no_leftovers: None, tmp_path: Path) -> None:
    cgroups_before, temp_before = our_cgroups(), our_temp_dirs()
    proc = subprocess.Popen([sys.executable, "-m", "nest_experiments", "run", str(_experiment(tmp_path, "30s")),
                             "--runtime", "host", "--no-plot", "--results", str(tmp_path / "results")],
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not child_processes(("httperf",)):
        time.sleep(0.2)
    try:
        assert child_processes(("httperf",)), "httperf never started"
        new = sorted(set(our_cgroups()) - set(cgroups_before))
        if find_cpu_controller() is not None:
            assert len(new) == 1 and new[0].endswith("-web")
        web_roots = [d for d in our_temp_dirs() if "-web-" in d and d not in temp_before]
        libs = [d for d in our_temp_dirs() if "-selectwait-" in d and d not in temp_before]
        assert len(web_roots) == 1 and libs == [], (web_roots, libs)  # the library comes from the project's cache
        assert selectwait.cached_library().exists()
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        assert set(our_cgroups()) - set(cgroups_before) == set(new), "the dead run's cgroup is still there"
        assert Path(web_roots[0]).is_dir(), "the dead run's web root should outlive it until clean"
        assert cli("clean").returncode == 0
        assert our_cgroups() == cgroups_before
        assert not Path(web_roots[0]).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
