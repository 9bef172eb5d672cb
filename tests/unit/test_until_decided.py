"""until_decided: blocks until the claims are decided, only the cells undecided claims need, within the budget."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.analysis import decisions, preregistration
from nest_experiments.analysis import sequential as seq
from nest_experiments.analysis.claims import CellNeed, Claim, Verdict
from nest_experiments.config.sweep import RunSpec
from nest_experiments.errors import ConfigError, NestExpError
from nest_experiments.rundir import RunFolder, dump_toml
from nest_experiments.runs.until_decided import (
    Budget,
    block_runs,
    committed_runs,
    matches,
    plan_block,
    run_until_decided,
    study_of,
)
from nest_experiments.studies.base import Study

EVIDENCE = Path(__file__).resolve().parents[2] / "evidence"
RAW = {
    "experiment": {"name": "ud", "duration": "10s", "repetitions": 1},
    "links": {"bottleneck": {"qdisc": {"kind": "pie", "target": "5ms"}}},
    "sweep": {"links.bottleneck.qdisc.kind": ["pie", "fq_pie"], "experiment.tcp_congestion_control": ["cubic", "reno"]},
}
FASTER = Claim(id="faster", statement="FQ-PIE faster", figure="Fig. 4", metric="tput", expect="a > b",
               a={"aqm": "fq_pie"}, b={"aqm": "pie"}, pair_by=("block", "cc"))
RENO = Claim(id="reno", statement="reno = cubic under PIE", figure="Fig. 0", metric="noise", expect="a > b",
             a={"cc": "reno"}, b={"cc": "cubic"}, conditions={"aqm": "pie"}, pair_by=("block",))


def cell_of(config: Mapping[str, Any]) -> dict[str, Any]:
    return {"aqm": config["links"]["bottleneck"]["qdisc"]["kind"],
            "cc": config["experiment"].get("tcp_congestion_control", "cubic")}


def metrics(run: RunFolder) -> dict[str, float | None]:
    return json.loads((run.path / "m.json").read_text())


STUDY = Study(name="ud", title="t", experiments=("ud",), paper_claims=(FASTER, RENO), cell_of=cell_of,
              session_metrics=metrics)


class Runner:
    """Writes each run as a completed run folder: FQ-PIE 3 units faster, reno and cubic alike (seeded)."""

    def __init__(self, folder: Path, run_s: float = 0.0) -> None:
        self.folder, self.rng = folder, random.Random(1)
        self.by_block: dict[int, list[str]] = {}  # the runs it was given, per block (it gets them one by one)
        self.run_s, self.now = run_s, 0.0  # the wall time a run takes, on the clock it keeps (clock())

    @property
    def blocks(self) -> list[list[str]]:
        return [sorted(names) for names in self.by_block.values()]

    def clock(self) -> float:
        return self.now

    def __call__(self, runs: list[RunSpec]) -> int:
        for r in runs:
            self.by_block.setdefault(r.repetition, []).append(r.name)
            d = self.folder / r.name
            if (d / "manifest.json").exists():
                continue  # completed: skipped, as run_sweep does
            self.now += self.run_s
            d.mkdir(parents=True)
            cell = cell_of(r.experiment.raw)
            (d / "config.toml").write_text(dump_toml(r.experiment.raw))
            (d / "m.json").write_text(json.dumps({"tput": 10 + 3 * (cell["aqm"] == "fq_pie") + self.rng.random(),
                                                  "noise": self.rng.gauss(0, 1)}))
            (d / "manifest.json").write_text(json.dumps({"status": "completed", "repetition": r.repetition}))
        return 0


def test_blocks_go_on_only_for_the_cells_undecided_claims_need(tmp_path: Path) -> None:
    runner = Runner(tmp_path)
    verdicts = run_until_decided(RAW, folder=tmp_path, execute=runner, budget=Budget(max_reps=7), out=io.StringIO(),
                                 study=STUDY)
    assert [v.verdict for v in verdicts][0] == seq.AGREES
    assert verdicts[1].verdict not in seq.DECIDED
    assert len(runner.blocks) == 7 and all(len(b) == 4 for b in runner.blocks[:4])  # 7 pairs decide at alpha_1
    assert runner.blocks[4:] == [[f"kind-pie_tcp_congestion_control-{cc}_r{k}" for cc in ("cubic", "reno")]
                                 for k in (5, 6, 7)]  # FASTER decided: only RENO's cells (aqm = pie)
    doc = json.loads((tmp_path / decisions.SEQUENTIAL_FILE).read_text())
    assert [look["block"] for look in doc["looks"]] == list(range(1, 8))
    assert doc["looks"][3]["verdicts"]["faster"] == seq.AGREES and doc["budget"]["max_reps"] == 7
    assert decisions.judge_sweep(STUDY.claims_for("ud"), STUDY.sessions(tmp_path), sequential=True) == verdicts


def test_the_first_block_is_preceded_by_a_freeze_of_the_claims_and_a_resume_keeps_it(tmp_path: Path) -> None:
    out = io.StringIO()
    run_until_decided(RAW, folder=tmp_path, execute=Runner(tmp_path), budget=Budget(max_reps=2), out=out, study=STUDY)
    doc = preregistration.read(tmp_path)
    assert doc["before_data"] is True and [c["id"] for c in doc["claims"]] == ["faster", "reno"]
    assert out.getvalue().index("2 claims frozen before any session") < out.getvalue().index("block 1")
    changed = (replace(FASTER, margin=1.0, margin_source="rule: later"), RENO)
    again = io.StringIO()
    run_until_decided(RAW, folder=tmp_path, execute=Runner(tmp_path), budget=Budget(max_reps=2), out=again,
                      study=replace(STUDY, paper_claims=changed))
    assert "frozen" not in again.getvalue() and preregistration.read(tmp_path) == doc  # made once
    assert preregistration.marked(tmp_path, changed)[0].post_hoc.startswith("its margin, margin_source changed")
    unfrozen = tmp_path / "late"
    Runner(unfrozen)(block_runs(RAW, 1))  # sessions before the first look of this invocation
    run_until_decided(RAW, folder=unfrozen, execute=Runner(unfrozen), budget=Budget(max_reps=1), out=io.StringIO(),
                      study=STUDY)
    assert preregistration.read(unfrozen)["before_data"] is False


def test_resuming_replays_the_same_looks_and_plans_the_same_blocks(tmp_path: Path) -> None:
    first = Runner(tmp_path)
    run_until_decided(RAW, folder=tmp_path, execute=first, budget=Budget(max_reps=5), out=io.StringIO(), study=STUDY)
    again = Runner(tmp_path)
    run_until_decided(RAW, folder=tmp_path, execute=again, budget=Budget(max_reps=5), out=io.StringIO(), study=STUDY)
    assert again.blocks == first.blocks
    assert [look["block"] for look in json.loads((tmp_path / decisions.SEQUENTIAL_FILE).read_text())["looks"]] == \
        [1, 2, 3, 4, 5]  # each look once


def test_it_stops_when_the_next_block_does_not_fit_the_budget(tmp_path: Path) -> None:
    runner, out = Runner(tmp_path, run_s=12.5), io.StringIO()  # block 1's 4 runs of 10 s take 50 s
    run_until_decided(RAW, folder=tmp_path, execute=runner, budget=Budget(seconds=80, max_reps=9), out=out,
                      clock=runner.clock, study=STUDY)
    assert "budget (80 s) has no room for block 2" in out.getvalue()  # 50 + 50 > 80: it would end part-way
    assert len(json.loads((tmp_path / decisions.SEQUENTIAL_FILE).read_text())["looks"]) == 1
    assert runner.blocks == [sorted(r.name for r in block_runs(RAW, 1))]


def test_a_block_longer_than_the_budget_runs_part_way_and_is_judged_only_once_complete(tmp_path: Path) -> None:
    """Block 1 (4 runs of 12.5 s) cannot fit in 30 s: it starts, stops after 2 runs, and takes no look; its two
    sessions are not judged (the next invocation completes the block, and the look follows it)."""
    runner, out = Runner(tmp_path, run_s=12.5), io.StringIO()
    verdicts = run_until_decided(RAW, folder=tmp_path, execute=runner, budget=Budget(seconds=30, max_reps=9),
                                 out=out, clock=runner.clock, study=STUDY)
    assert "no room for the rest of block 1 (2 of its 4 run(s) run)" in out.getvalue()
    assert [len(b) for b in runner.blocks] == [2]
    assert json.loads((tmp_path / decisions.SEQUENTIAL_FILE).read_text())["looks"] == []  # sequential, no look yet
    sessions = STUDY.sessions(tmp_path)
    assert len(sessions) == 2 and decisions.in_progress(tmp_path, sessions) == (1, 2)
    assert [v.n_pairs for v in verdicts] == [0, 0] == [v.n_pairs for v in STUDY.verdicts(tmp_path)]
    again = Runner(tmp_path)  # the same command again, no budget: block 1 completed (2 runs skipped), then a look
    run_until_decided(RAW, folder=tmp_path, execute=again, budget=Budget(max_reps=1), out=io.StringIO(),
                      study=STUDY)
    assert [look["block"] for look in json.loads((tmp_path / decisions.SEQUENTIAL_FILE).read_text())["looks"]] == [1]
    assert decisions.in_progress(tmp_path, STUDY.sessions(tmp_path)) is None
    assert [v.n_pairs for v in STUDY.verdicts(tmp_path)] == [2, 1]


class SaturatedFrom(Runner):
    """As Runner, but from block ``first`` on every run had a CPU-saturated window (a machine slower than the study
    was sized for)."""

    def __init__(self, folder: Path, first: int) -> None:
        super().__init__(folder)
        self.first = first

    def __call__(self, runs: list[RunSpec]) -> int:
        code = super().__call__(runs)
        for r in runs:
            if r.repetition >= self.first:
                path = self.folder / r.name / "manifest.json"
                path.write_text(json.dumps({**json.loads(path.read_text()), "cpu_saturated_windows": 3}))
        return code


def test_it_stops_after_a_block_that_gave_no_undecided_claim_a_session(tmp_path: Path) -> None:
    """Block 3's runs all saturated: no open claim's look can count, and more blocks would only spend the budget;
    it stops after that block, and the claims are judged as after block 2 (block 3's look spends nothing)."""
    runner, out = SaturatedFrom(tmp_path, first=3), io.StringIO()
    verdicts = run_until_decided(RAW, folder=tmp_path, execute=runner, budget=Budget(max_reps=9), out=out,
                                 study=STUDY)
    assert len(runner.blocks) == 3
    assert ("until decided: block 3 gave no undecided claim a session it can use (4 of its 4 run(s) saturated, "
            "0 without a session)") in out.getvalue()
    two = decisions.judge_sweep(STUDY.claims_for("ud"), STUDY.sessions(tmp_path).query("block <= 2"), sequential=True)
    def judged(vs: list[Verdict]) -> list[tuple[Any, ...]]:
        return [(v.verdict, v.effect, v.n_pairs, v.look, v.alpha) for v in vs]

    assert judged(verdicts) == judged(two) and [v.n_saturated_excluded for v in verdicts] == [4, 2]
    # unsaturated from block 3 on, the same sweep goes on past it
    other, out = tmp_path / "other", io.StringIO()
    run_until_decided(RAW, folder=other, execute=Runner(other), budget=Budget(max_reps=4), out=out, study=STUDY)
    assert "gave no undecided claim" not in out.getvalue() and "--max-reps 4 reached" in out.getvalue()
    # the last block allowed saturates too: the sweep ends for --max-reps (what a user raises to go on), not for it
    last, out = tmp_path / "last", io.StringIO()
    run_until_decided(RAW, folder=last, execute=SaturatedFrom(last, first=3), budget=Budget(max_reps=3), out=out,
                      study=STUDY)
    assert "gave no undecided claim" not in out.getvalue() and "--max-reps 3 reached" in out.getvalue()


def test_block_runs_and_matches() -> None:
    runs = block_runs(RAW, 3)
    assert len(runs) == 4 and {r.repetition for r in runs} == {3}
    assert matches({"aqm": "pie", "cc": "reno"}, {"aqm": "pie"})
    assert matches({"aqm": "pie"}, {"aqm": ("pie", "fq_pie")}) and not matches({"aqm": "pie"}, {"aqm": "fq_pie"})


def test_a_need_that_names_the_runtime_plans_the_runs_of_that_runtime() -> None:
    # h2quic's RTT claims name runtime = "vm" (the session table's runtime column, from the manifest): the next
    # block's runs are in their cells when the blocks run in the VM; before, no run was ("name no cell")
    runs, need = block_runs(RAW, 3), [CellNeed(cell={"runtime": "vm", "aqm": "pie"}, sessions=3, claims=("x",))]
    assert sorted(r.name for r in plan_block(runs, need, cell_of, "vm")) == \
        [f"kind-pie_tcp_congestion_control-{cc}_r3" for cc in ("cubic", "reno")]
    assert plan_block(runs, need, cell_of, "host") == [] and plan_block(runs, need, cell_of) == []


def test_an_experiment_without_claims_cannot_run_until_decided() -> None:
    with pytest.raises(ConfigError, match="until-decided.*no study with claims"):
        study_of("no_such_experiment")


def test_the_command_line_checks_until_decided_before_anything_runs(capsys: pytest.CaptureFixture[str],
                                                                    tmp_path: Path) -> None:
    from nest_experiments.cli import main

    assert main(["run", "--until-decided", "--check", "--budget", "3h"]) == 0
    out = capsys.readouterr()
    assert len(out.out.splitlines()) == 6 and all(line.endswith("_r1") for line in out.out.splitlines())
    assert "claims (nest)" in out.err
    assert main(["run", "--until-decided", "--check", "--reps", "2"]) == 1
    assert "drop --reps" in capsys.readouterr().err
    assert main(["run", "--until-decided", "--check", "--budget", "3x"]) == 2
    assert "--budget" in capsys.readouterr().err
    nest, objects = (str(EVIDENCE / name) for name in ("nest_paper", "under_hood_objects"))
    assert main(["run", "--check", "--continue-from", nest]) == 1
    assert "--continue-from goes with --until-decided" in capsys.readouterr().err
    assert main(["run", "--until-decided", "--check", "--continue-from", objects]) == 1
    assert "its sessions are of experiment 'under_hood_objects', this sweep runs 'nest_paper'" in capsys.readouterr().err
    assert main(["run", "--until-decided", "--check", "--continue-from", nest, "--results", str(tmp_path)]) == 0
    assert not list(tmp_path.iterdir())  # --check copies nothing


def _commit(sweep: Path, into: Path) -> None:
    """The sweep's sessions where a sweep going on from its evidence finds them (what evidence.adopt copies)."""
    (into / decisions.PRIOR_DIR).mkdir(parents=True)
    STUDY.sessions(sweep).to_csv(into / decisions.PRIOR_DIR / decisions.PRIOR_SESSIONS, index=False)


def test_a_sweep_goes_on_from_committed_sessions_without_running_them_again(tmp_path: Path) -> None:
    earlier, here = tmp_path / "earlier", tmp_path / "here"
    run_until_decided(RAW, folder=earlier, execute=Runner(earlier), budget=Budget(max_reps=3), out=io.StringIO(),
                      study=STUDY)
    _commit(earlier, here)  # a fresh machine: the evidence of blocks 1-3, no run folder
    runner, out = Runner(here), io.StringIO()
    verdicts = run_until_decided(RAW, folder=here, execute=runner, budget=Budget(max_reps=5), out=out, study=STUDY)
    assert [{name[-2:] for name in block} for block in runner.blocks] == [{"r4"}, {"r5"}]  # blocks 4 and 5 only
    assert "until decided: block 1: 0 run(s) (4 committed before)" in out.getvalue()
    looks = json.loads((here / decisions.SEQUENTIAL_FILE).read_text())["looks"]
    assert [look["block"] for look in looks] == [1, 2, 3, 4, 5]
    assert looks[:3] == json.loads((earlier / decisions.SEQUENTIAL_FILE).read_text())["looks"]  # replayed as made
    sessions = STUDY.sessions(here)
    assert len(sessions) == 12 + sum(len(b) for b in runner.blocks)
    assert sorted(sessions["block"][:12]) == sorted([1, 2, 3] * 4)  # the committed sessions first
    assert set(sessions["block"][12:]) == {4, 5}
    assert decisions.judge_sweep(STUDY.claims_for("ud"), sessions, sequential=True) == verdicts


def test_committed_sessions_of_another_sweep_or_run_again_are_refused(tmp_path: Path) -> None:
    earlier, here = tmp_path / "earlier", tmp_path / "here"
    run_until_decided(RAW, folder=earlier, execute=Runner(earlier), budget=Budget(max_reps=2), out=io.StringIO(),
                      study=STUDY)
    other = {**RAW, "sweep": {**RAW["sweep"], "experiment.tcp_congestion_control": ["cubic", "bbr"]}}
    with pytest.raises(ConfigError, match="--continue-from: committed session kind-fqpie_tcp_congestion_control-"
                                          "reno_r1 .block 1. is no run of this sweep"):
        committed_runs(other, STUDY.sessions(earlier))
    assert committed_runs(RAW, STUDY.sessions(earlier)) == {r.name for k in (1, 2) for r in block_runs(RAW, k)}
    _commit(earlier, here)
    Runner(here)(block_runs(RAW, 1)[:1])  # a committed session run again in this folder: it would count twice
    with pytest.raises(NestExpError, match=f"run folder {block_runs(RAW, 1)[0].name} is also a session of .*prior's "
                                           "sessions.csv .the evidence this sweep goes on from.: move the run folder"):
        STUDY.sessions(here)
