"""results.load: a sweep's run folders as tidy frames, the same numbers as the report's (one reader)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from nest_experiments import results
from nest_experiments.analysis import report
from nest_experiments.analysis import results as reader  # the per-run readers behind results.load
from nest_experiments.errors import NestExpError
from tests.unit.sweep_synth import RunSpec, make_run, make_sweep

REAL = Path(__file__).resolve().parents[1] / "data" / "run_folders" / "cluster_short"  # a cluster sweep's folders


def test_a_real_sweep_folder_as_frames() -> None:
    r = results.load(REAL)
    runs = r.runs.set_index("run")
    assert list(runs.index) == ["qdisc-pfifo-100_r1", "qdisc-pfifo-20_r1", "qdisc-pfifo-20_r2"]
    assert r.swept == ("links.bottleneck.qdisc.kind", "links.bottleneck.qdisc.limit")
    assert runs["links.bottleneck.qdisc.limit"].tolist() == [100, 20, 20]  # swept values keep their type
    assert runs["links.bottleneck.qdisc.kind"].tolist() == ["pfifo"] * 3
    assert runs.status.tolist() == ["completed", "completed", "failed"]
    assert runs.loc["qdisc-pfifo-20_r2", "reason"].startswith("the worker running it was lost twice")
    assert runs.loc["qdisc-pfifo-20_r1", "runtime"] == "host"
    assert runs.loc["qdisc-pfifo-20_r1", "cluster.local_workers"] == 2  # nested manifest tables as dotted columns
    assert runs.loc["qdisc-pfifo-20_r1", "n_warnings"] == 1 and "warnings" not in runs  # CPU saturated: 2 at once
    assert runs.loc["qdisc-pfifo-20_r1", "repetition"] == 1 and runs.loc["qdisc-pfifo-20_r2", "repetition"] == 2
    # qdisc series: every row of the completed runs' qdisc.csv, with the run's name
    q = r.qdisc
    assert set(q.run) == {"qdisc-pfifo-100_r1", "qdisc-pfifo-20_r1"}
    for name in ("qdisc-pfifo-100_r1", "qdisc-pfifo-20_r1"):
        own = pd.read_csv(REAL / name / "qdisc.csv")
        mine = q[q.run == name].drop(columns=["run", "repetition", *r.swept]).reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, own, check_dtype=False)
    assert set(q.link) == {"bottleneck"} and {"pfifo", "htb"} <= set(q.kind)
    # each row carries its run's repetition and swept values
    assert q.groupby("run")["links.bottleneck.qdisc.limit"].unique().map(list).to_dict() == {
        "qdisc-pfifo-100_r1": [100], "qdisc-pfifo-20_r1": [20]}
    # no DASH app and no AQM here: no segments, no metrics (and no error)
    assert r.segments.empty and list(r.segments.columns) == ["run", "repetition", *r.swept]
    assert r.metrics.empty and list(r.metrics.columns) == ["run", "metric", "value", "unit"]


def test_metrics_are_the_reports_numbers(tmp_path: Path) -> None:
    folder = make_sweep(tmp_path, reps=2, targets=(5, 10))
    r = results.load(folder)
    sweep = report.load_sweep(folder)
    assert len(r.runs) == len(sweep.runs) == 8
    mine = {(row.run, row.metric): row.value for row in r.metrics.itertuples()}
    theirs = {(run.name, k): v for run in sweep.runs for k, v in run.metrics.items()}
    assert mine.keys() == theirs.keys() and len(mine) > 8 * 10
    assert all(math.isclose(mine[k], theirs[k]) for k in mine)
    units = dict(zip(r.metrics.metric, r.metrics.unit, strict=True))
    assert units["video.avg_bitrate_kbps"] == "kbit/s" and units["session.stall_s"] == "s"
    assert units["qdelay_ms.bn1 r1->r3.kernel"] == "ms" and units["qdelay_ms.bn1 r1->r3.capture"] == "ms"
    pie5 = r.metrics.merge(r.runs, on="run")
    pie5 = pie5[(pie5["links.bn1.forward.qdisc.kind"] == "pie") & (pie5["links.bn1.forward.qdisc.target"] == "5ms")]
    assert pie5[pie5.metric == "qdelay_ms.bn1 r1->r3.kernel"].value.tolist() == pytest.approx([5.5, 5.5])


def test_segments_of_every_completed_run_and_failed_runs_listed(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    make_run(folder, RunSpec(aqm="pie", repetition=1, video_levels=(0, 1, 2)))
    make_run(folder, RunSpec(aqm="pie", repetition=2, status="failed", reason="iperf3 did not finish in time"))
    r = results.load(folder)
    runs = r.runs.set_index("run")
    assert runs.status.to_dict() == {"kind-pie_target-5ms_r1": "completed", "kind-pie_target-5ms_r2": "failed"}
    assert runs.loc["kind-pie_target-5ms_r2", "reason"] == "iperf3 did not finish in time"
    assert set(r.metrics.run) == set(r.segments.run) == set(r.qdisc.run) == {"kind-pie_target-5ms_r1"}
    video = r.segments[r.segments.stream == "video"]
    assert video.level.tolist() == [0, 1, 2]
    front = ["run", "repetition", *r.swept]
    assert list(r.segments.columns[:len(front) + 1]) == [*front, "stream"] and len(r.swept) == 4


def test_a_single_run_folder_loads_too() -> None:
    r = results.load(str(REAL / "qdisc-pfifo-20_r1"))
    assert r.runs.run.tolist() == ["qdisc-pfifo-20_r1"]


def test_no_run_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(NestExpError, match="no run folder"):
        results.load(tmp_path)


def test_manifest_fields_flatten_tables_and_lists() -> None:
    fields = reader.manifest_fields({"status": "completed", "point": {"a": 1}, "warnings": ["x", "y"],
                                      "vm": {"accel": "tcg", "warmup_s": "30"}, "parallel_runs": ["nx1", "nx2"]})
    assert fields == {"n_warnings": 2, "status": "completed", "vm.accel": "tcg", "vm.warmup_s": "30",
                      "parallel_runs": "nx1 | nx2"}


def test_a_stall_the_session_stopped_in_is_in_the_dash_metrics(tmp_path: Path) -> None:
    import json

    folder = tmp_path / "sweep"
    run = make_run(folder, RunSpec(aqm="pie", repetition=1, video_levels=(0, 1, 2)))
    before = reader.dash_metrics(run, [])
    (run / "qoe.json").write_text(json.dumps({"video": {"end_reason": "duration limit", "stall_at_end": {
        "stream": "video", "t_start": 30.0, "duration_s": 4.0}}}))
    after = reader.dash_metrics(run, [])
    assert after["session.stall_s"] == pytest.approx(before["session.stall_s"] + 4.0)
    assert after["video.stall_s"] == pytest.approx(before["video.stall_s"] + 4.0)
    assert after["audio.stall_s"] == before["audio.stall_s"]
