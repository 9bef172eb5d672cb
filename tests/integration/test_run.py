"""The run command end to end on the host kernel: real namespaces, real iperf3 flows."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from nest_experiments.analysis.utilization import egress_figures, iperf3_goodput_bps, qdisc_gaps
from tests.conftest import ROOT, child_processes, cli, our_namespaces

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]

FIFO = str(ROOT / "experiments" / "dumbbell_fifo.toml")  # runs on the host kernel (HTB + pfifo)
RUN = "qdisc-pfifo-100_r1"
SHORT = [FIFO, "--set", "experiment.duration=8s", "--only", RUN, "--no-plot"]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("results")
    proc = cli("run", *SHORT, "--results", str(results))
    assert proc.returncode == 0, proc.stderr
    return results / "dumbbell_fifo" / RUN


def test_run_folder_follows_the_contract(default_run: Path) -> None:
    manifest = json.loads((default_run / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["runtime"] == "host" and manifest["kernel"] and manifest["tcp_congestion_control"] == "cubic"
    for key in ("started", "finished", "seed", "warnings", "versions"):
        assert key in manifest
    assert "iperf3" in manifest["versions"]
    cpu = manifest["cpu"]  # the CPU guard's record (collectors.cpu): both rules over the same 1 s windows
    assert cpu["windows"] >= 7 and cpu["saturated_by"]["machine"] == manifest["cpu_saturated_windows"]
    assert cpu["saturated_windows"] == len(cpu["saturated_t"]) >= max(cpu["saturated_by"].values())
    assert cpu["process_max"]["share"] > 0 and cpu["process_max"]["comm"]  # iperf3 or the runner used some CPU
    q = pd.read_csv(default_run / "qdisc.csv")
    assert {"t", "node", "dev", "kind", "backlog_bytes", "backlog_pkts", "drops", "sent_pkts", "delay_ms",
            "prob"} <= set(q.columns)
    assert set(q.kind) == {"htb", "pfifo"}
    iperf = pd.read_csv(default_run / "iperf3.csv")
    assert {"t", "flow", "src", "dst", "bits_per_second", "retransmits"} <= set(iperf.columns)
    assert iperf.flow.nunique() == 5
    assert not list(default_run.glob(".*.tmp"))
    phases = manifest["phases"]  # runs.phases: every phase of a completed host run
    assert set(phases) == {"cleanup", "topology", "app_prepare", "collectors_start", "traffic", "drain",
                           "collection", "outputs", "app_stop", "teardown", "match"}
    assert 7.9 <= phases["traffic"] <= 9.5 and all(v >= 0 for v in phases.values())  # the 8 s duration
    started, finished = (dt.datetime.fromisoformat(manifest[k]) for k in ("started", "finished"))
    assert sum(phases.values()) <= (finished - started).total_seconds() + 0.1  # laps of one clock: no overlap
    assert set(manifest["app_start_s"]) == {"bulk"}  # the file's one app
    sweep = [r for r in map(json.loads, (default_run.parent / "sweeps.jsonl").read_text().splitlines())
             if r["side"] == "runner"]
    assert len(sweep) == 1 and sweep[0]["runs_executed"] == 1 and sweep[0]["traffic_s"] == 8.0
    assert sweep[0]["runs"] >= sum(phases.values()) - 0.1


def test_sampler_covers_the_traffic_without_gaps(default_run: Path) -> None:
    manifest = json.loads((default_run / "manifest.json").read_text())
    gaps = qdisc_gaps(default_run)
    assert gaps["first_t"] <= manifest["traffic_start_t"] <= gaps["first_t"] + 0.5
    assert abs(gaps["last_t"] - manifest["traffic_end_t"]) <= 0.5
    assert gaps["max_gap_s"] <= 0.3


def test_bottleneck_is_fully_used_and_goodput_is_reported(default_run: Path) -> None:
    (fwd,) = [f for f in egress_figures(default_run) if f.node == "r1"]
    assert fwd.utilization is not None and fwd.utilization >= 0.95
    assert fwd.drops > 0  # 5 CUBIC flows overflow a 100-packet FIFO
    goodput = iperf3_goodput_bps(default_run)
    assert goodput is not None and 0.85 * 10e6 <= goodput <= 10e6


def _files(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``folder``: its mtime (ns) and SHA-256."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_resume_skips_completed_runs(default_run: Path) -> None:
    results = default_run.parent.parent
    before = _files(default_run)
    assert "manifest.json" in before and "qdisc.csv" in before
    folders = sorted(p.name for p in default_run.parent.iterdir())
    proc = cli("run", *SHORT, "--results", str(results))
    assert proc.returncode == 0 and "completed earlier, skipped" in proc.stderr
    assert _files(default_run) == before  # not one file of the completed run rewritten, added or removed
    assert sorted(p.name for p in default_run.parent.iterdir()) == folders  # and no new run folder


def test_a_run_run_again_starts_from_an_empty_folder(default_run: Path, tmp_path: Path) -> None:
    """A run whose config changed (or that failed) runs again into its folder: nothing of the last attempt stays
    (a stale ``raw/<app>.client.go`` once started the players before the run's go, Caddy appended to its old access
    log)."""
    import shutil

    results = tmp_path / "results"
    shutil.copytree(default_run.parent.parent, results)
    run_dir = results / "dumbbell_fifo" / RUN
    (run_dir / "raw" / "stale.client.go").write_text('{"t0": 1.0}')
    (run_dir / "stale.csv").write_text("x\n")
    proc = cli("run", *SHORT, "--set", "experiment.duration=9s", "--results", str(results))
    assert proc.returncode == 0 and "completed earlier, skipped" not in proc.stderr, proc.stderr
    assert not (run_dir / "stale.csv").exists() and not (run_dir / "raw" / "stale.client.go").exists()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["duration_s"] == 9.0


def test_bad_file_is_rejected_before_any_namespace(no_leftovers: None) -> None:
    for bad in sorted((ROOT / "tests/data/bad").glob("*.toml")):
        proc = cli("run", str(bad))
        assert proc.returncode == 2, bad
        assert proc.stderr.strip().count("\n") == 0, proc.stderr
        assert proc.stderr.startswith("error: ")
    assert our_namespaces() == []


def test_missing_qdisc_stops_before_any_namespace(no_leftovers: None, tmp_path: Path) -> None:
    from nest_experiments.net.kernel import probe_feature

    if probe_feature("pie").ok:
        pytest.skip("this kernel has pie: nothing to refuse")
    proc = cli("run", "--runtime", "host", "--results", str(tmp_path))  # the default experiment uses pie
    assert proc.returncode == 1
    line = proc.stderr.strip()
    assert "\n" not in line and "'pie'" in line and "sch_pie" in line and "--runtime vm" in line
    assert not (tmp_path / "default").exists()


def _start_run(results: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "nest_experiments", "run", FIFO, "--set", "experiment.duration=30s",
                             "--only", RUN, "--no-plot", "--results", str(results), *extra],
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})


def _wait_for_traffic(proc: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if len(child_processes(("iperf3",))) >= 2:  # server and client
            time.sleep(1.0)
            return
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"traffic never started: {proc.communicate()}")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_mid_run_leaves_nothing(no_leftovers: None, tmp_path: Path, sig: int, code: int) -> None:
    proc = _start_run(tmp_path)
    _wait_for_traffic(proc)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    manifest = json.loads((tmp_path / "dumbbell_fifo" / RUN / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"


def test_exception_mid_run_is_recorded_and_cleaned(no_leftovers: None, tmp_path: Path) -> None:
    proc = _start_run(tmp_path, env={"NEST_EXP_FAULT_AT": "3"})
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    run_dir = tmp_path / "dumbbell_fifo" / RUN
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "injected fault" in manifest["reason"]
    assert (run_dir / "error.log").exists()


def test_next_run_cleans_what_a_killed_run_left(tmp_path: Path) -> None:
    foreign = "nxforeign-keep"  # looks like ours, but no state file lists it: must survive
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    try:
        proc = _start_run(tmp_path)
        _wait_for_traffic(proc)
        proc.kill()
        proc.wait()
        left = [ns for ns in our_namespaces() if ns != foreign]
        assert left, "a kill -9'd run leaves its namespaces (until the next run)"
        assert cli("clean").returncode == 0
        assert our_namespaces() == [foreign]
        time.sleep(0.5)
        assert child_processes() == []  # the iperf3s died with their parent or were killed
    finally:
        subprocess.run(["ip", "netns", "delete", foreign], check=False)
