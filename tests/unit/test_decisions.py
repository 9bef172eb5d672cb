"""analysis.decisions: the per-session table from run folders, and the sweep's verdicts (fixed-size or sequential)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nest_experiments.analysis import decisions
from nest_experiments.analysis import sequential as seq
from nest_experiments.analysis.claims import Claim
from nest_experiments.rundir import RunFolder, dump_toml

CLAIM = Claim(id="faster", statement="FQ-PIE gives more throughput", figure="Fig. 4", metric="tput", expect="a > b",
              a={"aqm": "fq_pie"}, b={"aqm": "pie"}, pair_by=("block",))


def cell_of(config: Mapping[str, Any]) -> dict[str, Any]:
    return {"aqm": config["links"]["bottleneck"]["qdisc"]}


def metrics(run: RunFolder) -> dict[str, float | None]:
    return {"tput": float(json.loads((run.path / "tput.json").read_text()))}


def make_run(folder: Path, name: str, *, aqm: str, block: int, tput: float, status: str = "completed",
             cpu: dict[str, Any] | None = None) -> None:
    d = folder / name
    d.mkdir(parents=True)
    (d / "config.toml").write_text(dump_toml({"links": {"bottleneck": {"qdisc": aqm}}}))
    manifest: dict[str, Any] = {"status": status, "repetition": block}
    if cpu is not None:
        manifest["cpu"] = cpu
    (d / "manifest.json").write_text(json.dumps(manifest))
    (d / "tput.json").write_text(json.dumps(tput))


def sweep(tmp_path: Path, gains: list[float]) -> Path:
    for block, gain in enumerate(gains, start=1):
        make_run(tmp_path, f"aqm-pie_r{block}", aqm="pie", block=block, tput=5.0 + 0.01 * block)
        make_run(tmp_path, f"aqm-fqpie_r{block}", aqm="fq_pie", block=block, tput=5.0 + 0.01 * block + gain)
    return tmp_path


def test_session_table_has_one_row_per_completed_run_with_block_cell_metrics_and_saturation(tmp_path: Path) -> None:
    folder = sweep(tmp_path, [1.0, 1.0])
    make_run(folder, "aqm-pie_r3", aqm="pie", block=3, tput=1.0, status="failed")
    make_run(folder, "aqm-fqpie_r3", aqm="fq_pie", block=3, tput=9.0,
             cpu={"saturated_windows": 2, "saturated_by": {"machine": 0, "process": 2}})
    table = decisions.session_table(folder, cell_of=cell_of, metrics=metrics)
    assert len(table) == 5  # the failed run is not a session
    assert set(table.columns) >= {"run", "block", "runtime", "aqm", "tput", "saturated"}
    assert table.set_index("run").loc["aqm-fqpie_r3", "saturated"]  # by the per-process rule alone
    assert not table.set_index("run").loc["aqm-pie_r1", "saturated"]


def test_saturated_windows_reads_the_cpu_record_else_the_machine_rule() -> None:
    assert decisions.saturated_windows({"cpu": {"saturated_windows": 3}, "cpu_saturated_windows": 0}) == 3
    assert decisions.saturated_windows({"cpu_saturated_windows": 1}) == 1
    assert decisions.saturated_windows({}) == 0


def test_windows_after_the_traffic_do_not_mark_the_session() -> None:
    # racing_chromium: the Chromium driver parsed its NetLog at t = 121-123 s of a 120 s session
    cpu = {"saturated_windows": 3, "saturated_t": [5.0, 122.226, 123.227]}
    assert decisions.saturated_windows({"cpu": cpu, "duration_s": 120.0}) == 1
    assert decisions.saturated_windows({"cpu": {**cpu, "saturated_t": [120.5]}, "duration_s": 120.0}) == 1  # (119.5, 120.5]
    assert decisions.saturated_windows({"cpu": {**cpu, "saturated_t": [121.0]}, "duration_s": 120.0}) == 0  # (120, 121]
    assert decisions.saturated_windows({"cpu": cpu}) == 3  # no duration recorded: every window


def test_a_fixed_sweep_is_judged_once_and_a_sequential_one_replayed(tmp_path: Path) -> None:
    """Nine blocks with FQ-PIE ahead: one analysis at 0.05 agrees; the same sessions as a sequential run are
    judged at the looks' alpha (decided at the claim's first look that could decide: 7 pairs)."""
    folder = sweep(tmp_path, list(np.linspace(0.5, 1.5, 9)))
    table = decisions.session_table(folder, cell_of=cell_of, metrics=metrics)
    [fixed] = decisions.judge_sweep([CLAIM], table, sequential=False)
    assert fixed.verdict == seq.AGREES and fixed.look is None and fixed.n_pairs == 9
    decisions.record_look(folder, alpha=0.05, verdicts=[fixed], block=9, budget={"max_reps": 9})
    assert decisions.is_sequential(folder)
    [sequential] = decisions.judge_sweep([CLAIM], table, sequential=True)
    assert sequential.verdict == seq.AGREES and sequential.look == 1 and sequential.n_pairs == 7
    doc = json.loads((folder / decisions.SEQUENTIAL_FILE).read_text())
    assert doc["looks"] == [{"block": 9, "verdicts": {"faster": "agrees"}}] and doc["alpha"] == 0.05


def test_a_claim_naming_cells_the_sweep_lacks_has_no_data(tmp_path: Path) -> None:
    other = Claim(id="h3", statement="s", figure="f", metric="tput", expect="a > b", a={"transport": "h3"},
                  b={"transport": "tcp"})
    table = decisions.session_table(sweep(tmp_path, [1.0]), cell_of=cell_of, metrics=metrics)
    [v] = decisions.judge_sweep([other], table, sequential=False)
    assert v.verdict == seq.NO_DATA
    [empty] = decisions.judge_sweep([CLAIM], pd.DataFrame(), sequential=False)
    assert empty.verdict == seq.NO_DATA


def test_verdict_rows_are_tidy(tmp_path: Path) -> None:
    table = decisions.session_table(sweep(tmp_path, [1.0] * 8), cell_of=cell_of, metrics=metrics)
    [row] = decisions.verdict_rows(decisions.judge_sweep([CLAIM], table, sequential=False))
    assert row["id"] == "faster" and row["verdict"] == "agrees" and row["a"] == "aqm=fq_pie"
    assert row["ci_low"] is not None and row["ci_low"] > 0 and row["n_pairs"] == 8
