from __future__ import annotations

import dataclasses
import io
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from nest_experiments.config.sweep import RunSpec, apply_overrides, apply_paper, expand
from nest_experiments.errors import ConfigError

BASE = {
    "experiment": {"name": "s", "duration": "5s", "repetitions": 2},
    "links": {"bottleneck": {"qdisc": {"kind": "pie", "target": "5ms"}}},
    "sweep": {"links.bottleneck.qdisc.kind": ["pie", "fq_pie"], "links.bottleneck.qdisc.target": ["5ms", "15ms"]},
}


def test_product_times_repetitions_with_deterministic_names() -> None:
    runs = expand(BASE)
    assert sorted(r.name for r in runs) == sorted([
        "kind-pie_target-5ms_r1", "kind-pie_target-5ms_r2", "kind-pie_target-15ms_r1", "kind-pie_target-15ms_r2",
        "kind-fqpie_target-5ms_r1", "kind-fqpie_target-5ms_r2", "kind-fqpie_target-15ms_r1",
        "kind-fqpie_target-15ms_r2",
    ])
    assert [r.name for r in expand(BASE)] == [r.name for r in runs]
    fq = next(r for r in runs if r.name == "kind-fqpie_target-15ms_r2").experiment.link("bottleneck").forward.qdisc
    assert fq is not None and fq.kind == "fq_pie" and fq.param("target") == pytest.approx(0.015)
    seeds = {r.name: r.seed for r in runs}
    assert seeds["kind-pie_target-5ms_r2"] == seeds["kind-pie_target-5ms_r1"] + 1


def test_run_order_is_blocks_of_repetitions_shuffled_with_the_seed() -> None:
    runs = expand(BASE, repetitions=3)
    assert [r.position for r in runs] == list(range(1, 13))
    assert [r.repetition for r in runs] == [1] * 4 + [2] * 4 + [3] * 4  # every point once per block
    blocks = [[r.name.rsplit("_r", 1)[0] for r in runs[i:i + 4]] for i in (0, 4, 8)]
    assert all(sorted(b) == sorted(blocks[0]) for b in blocks)
    assert len({tuple(b) for b in blocks}) > 1  # shuffled per block, not the file's order every time
    reseeded = {**BASE, "experiment": {**BASE["experiment"], "seed": 7}}
    assert [r.name for r in expand(reseeded, repetitions=3)] != [r.name for r in runs]


def test_repetitions_override() -> None:
    assert len(expand(BASE, repetitions=4)) == 16


def test_a_bad_value_in_a_sweep_is_found_before_anything_runs() -> None:
    bad = {**BASE, "sweep": {"links.bottleneck.qdisc.kind": ["pie", "pfifo"]}}
    with pytest.raises(ConfigError, match=r"links\.bottleneck\.qdisc\.target.*pfifo"):
        expand(bad)


def test_set_overrides_parse_toml_values() -> None:
    raw = apply_overrides(BASE, ["experiment.duration=30s", "experiment.repetitions=3", "links.bottleneck.rate=5mbit"])
    assert raw["experiment"]["duration"] == "30s"
    assert raw["experiment"]["repetitions"] == 3
    assert raw["links"]["bottleneck"]["rate"] == "5mbit"
    assert BASE["experiment"]["duration"] == "5s"  # the base is not modified
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        apply_overrides(BASE, ["nonsense"])


def test_qdisc_shorthand_can_be_swept_into() -> None:
    raw = {"experiment": {"name": "s", "duration": "5s"}, "links": {"bottleneck": {"qdisc": "pie"}},
           "sweep": {"links.bottleneck.qdisc.target": ["5ms"]}}
    (run,) = expand(raw)
    q = run.experiment.link("bottleneck").forward.qdisc
    assert q is not None and q.kind == "pie" and q.param("target") == pytest.approx(0.005)


MULTI = {
    "experiment": {"name": "m", "topology": "multihomed_dumbbell", "duration": "5s"},
    "links": {"bn1": {"forward": {"qdisc": {"kind": "pie", "target": "5ms"}}},
              "bn2": {"forward": {"qdisc": {"kind": "pie", "target": "5ms"}}}},
    "sweep": {"links.bn1.forward.qdisc.kind, links.bn2.forward.qdisc.kind": ["pie", "fq_pie"]},
}


def test_one_axis_can_set_several_keys_together() -> None:
    runs = expand(MULTI)
    assert [r.name for r in runs] == ["kind-pie_r1", "kind-fqpie_r1"]
    kinds = [(r.experiment.link("bn1").forward.qdisc.kind, r.experiment.link("bn2").forward.qdisc.kind)  # type: ignore[union-attr]
             for r in runs]
    assert kinds == [("pie", "pie"), ("fq_pie", "fq_pie")]
    bad = {**MULTI, "sweep": {"links.bn1.forward.qdisc.kind, ": ["pie"]}}
    with pytest.raises(ConfigError, match="empty key"):
        expand(bad)


def test_paper_table_applies_its_overrides_and_is_required_for_paper() -> None:
    raw = {**BASE, "paper": {"experiment.repetitions": 25, "experiment.duration": "184s"}}
    full = apply_paper(raw)
    assert full["experiment"]["repetitions"] == 25 and full["experiment"]["duration"] == "184s"
    assert len(expand(full)) == 4 * 25 and len(expand(raw)) == 4 * 2  # the file itself is the reduced sweep
    with pytest.raises(ConfigError, match=r"\[paper\]"):
        apply_paper(BASE)
    with pytest.raises(ConfigError, match="paper.bogus.key"):
        apply_paper({**BASE, "paper": {"bogus.key": 1}})


def test_sweep_repeat_gives_one_point_more_repetitions_in_later_blocks() -> None:
    raw = {**BASE, "experiment": {**BASE["experiment"], "repetitions": 1},
           "sweep_repeat": {"kind-fqpie_target-15ms": 3}}
    runs = expand(raw)
    assert len(runs) == 4 + 2
    assert [r.name for r in runs[4:]] == ["kind-fqpie_target-15ms_r2", "kind-fqpie_target-15ms_r3"]
    twins = [r.experiment for r in runs if r.name.startswith("kind-fqpie_target-15ms")]
    assert twins[0].link("bottleneck") == twins[1].link("bottleneck") == twins[2].link("bottleneck")
    assert len(expand(raw, repetitions=2)) == 8 + 1  # --reps for all, the repeated point keeps its 3
    assert len(expand({**BASE, "sweep_repeat": {"kind-pie_target-5ms": 1}})) == 8  # never fewer than the rest


@pytest.mark.parametrize(("table", "message"), [
    ({"kind-fqpie_target-15m": 2}, r"sweep_repeat\.kind-fqpie_target-15m: no such sweep point .*did you mean "
                                   r"'kind-fqpie_target-15ms'"),
    ({"kind-pie_target-5ms": 0}, r"sweep_repeat\.kind-pie_target-5ms: expected a number of repetitions >= 1"),
    ({"kind-pie_target-5ms": "2"}, r"expected a number of repetitions"),
])
def test_sweep_repeat_names_a_bad_point_or_count(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        expand({**BASE, "sweep_repeat": table})


TRACED = {
    "experiment": {"name": "t", "duration": "5s", "repetitions": 3},
    "links": {"bottleneck": {"forward": {"trace": {"generator": "fcc", "seed": 1}}}},
    "sweep": {"links.bottleneck.forward.trace.generator": ["fcc", "hsdpa"], "experiment.tcp_congestion_control":
              ["cubic", "reno"]},
    "sweep_block": {"links.bottleneck.forward.trace.seed": "repetition"},
}


def test_sweep_block_gives_each_block_its_own_trace_shared_by_the_blocks_points() -> None:
    runs = expand(TRACED)
    source = {r.name: r.experiment.link("bottleneck").forward.trace.source for r in runs}  # type: ignore[union-attr]
    assert source["generator-fcc_tcp_congestion_control-cubic_r1"] == "fcc(seed=1)"
    assert source["generator-fcc_tcp_congestion_control-reno_r1"] == "fcc(seed=1)"  # paired within the block
    assert source["generator-fcc_tcp_congestion_control-reno_r3"] == "fcc(seed=3)"
    assert source["generator-hsdpa_tcp_congestion_control-cubic_r2"] == "hsdpa(seed=2)"
    assert [r.name for r in expand(TRACED)] == [r.name for r in runs]


def test_sweep_repeat_copies_replay_the_first_block_under_sweep_block() -> None:
    """An A/A copy ([sweep_repeat] beyond the experiment's repetitions) plays its point's first trace again."""
    raw = {**TRACED, "experiment": {**TRACED["experiment"], "repetitions": 2},
           "sweep_repeat": {"generator-fcc_tcp_congestion_control-cubic": 3}}
    source = {r.name: r.experiment.link("bottleneck").forward.trace.source  # type: ignore[union-attr]
              for r in expand(raw)}
    assert source["generator-fcc_tcp_congestion_control-cubic_r2"] == "fcc(seed=2)"  # a regular block
    assert source["generator-fcc_tcp_congestion_control-cubic_r3"] == "fcc(seed=1)"  # the copy of block 1
    assert "generator-fcc_tcp_congestion_control-reno_r3" not in source
    again = {r.name: r.experiment.link("bottleneck").forward.trace.source  # type: ignore[union-attr]
             for r in expand(raw, repetitions=3)}
    assert again["generator-fcc_tcp_congestion_control-cubic_r3"] == "fcc(seed=3)"  # --reps 3: a regular block


def test_sweep_block_takes_only_the_repetition() -> None:
    with pytest.raises(ConfigError, match=r"sweep_block\.links.*repetition"):
        expand({**TRACED, "sweep_block": {"links.bottleneck.forward.trace.seed": "seed"}})


def test_paper_sweep_table_replaces_axes() -> None:
    raw = {**BASE, "paper": {"experiment.repetitions": 1,
                             "sweep": {"links.bottleneck.qdisc.target": ["5ms", "10ms", "15ms"]}}}
    full = apply_paper(raw)
    assert full["sweep"]["links.bottleneck.qdisc.kind"] == ["pie", "fq_pie"]  # kept
    assert len(expand(full)) == 2 * 3 and len(expand(raw)) == 4 * 2
    assert BASE["sweep"]["links.bottleneck.qdisc.target"] == ["5ms", "15ms"]  # the base is not modified
    repeated = apply_paper({**raw, "sweep_repeat": {"kind-pie_target-5ms": 2},
                            "paper": {**raw["paper"], "sweep_repeat": {"kind-pie_target-5ms": 3}}})
    assert repeated["sweep_repeat"] == {"kind-pie_target-5ms": 3} and len(expand(repeated)) == 2 * 3 + 2


def test_warm_up_runs_once_before_the_first_run_that_is_not_skipped(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    import contextlib

    from nest_experiments.runs import outcome, runner

    executed: list[tuple[str, float, Path]] = []

    class FakeRun:
        def __init__(self, spec: RunSpec, run_dir: Path, *, runs_before: int = 0, **_hooks: object) -> None:
            self.spec, self.run_dir = spec, run_dir

        def execute(self) -> outcome.RunOutcome:
            executed.append((self.spec.name, self.spec.experiment.duration_s, self.run_dir))
            return outcome.RunOutcome(self.spec.name, "completed", "", 0.0, self.run_dir)

    runs = expand(BASE)
    done = runs[0]
    monkeypatch.setattr(runner, "Run", FakeRun)
    monkeypatch.setattr(runner, "run_lock", contextlib.nullcontext)
    monkeypatch.setattr(runner, "is_completed", lambda run_dir, _text: run_dir.name == done.name)
    runner.run_sweep(runs, results_root=tmp_path, out=io.StringIO(), warmup_s=3)
    warm, first = executed[0], executed[1]
    assert warm[0] == f"warmup-{runs[1].name}" and warm[1] == 10.0  # the first run that runs, at least 10 s
    assert not warm[2].is_relative_to(tmp_path) and not warm[2].parent.exists()  # thrown away
    assert first[0] == runs[1].name and first[1] == 5.0
    assert [e[0] for e in executed[1:]] == [r.name for r in runs[1:]]  # once only
    executed.clear()
    runner.run_sweep(runs, results_root=tmp_path, out=io.StringIO())
    assert not any(e[0].startswith("warmup-") for e in executed)  # off by default (on the host)
    monkeypatch.setattr(runner, "is_completed", lambda _dir, _text: False)
    executed.clear()
    runner.run_sweep(runs, results_root=tmp_path, out=io.StringIO(), warmup_s=30)
    assert executed[0][:2] == (f"warmup-{runs[0].name}", 30.0)


def test_each_run_starts_the_warm_processes_of_the_run_after_it_as_its_traffic_ends(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import contextlib

    from nest_experiments.runs import outcome, runner

    events: list[str] = []

    class FakePool:
        def __init__(self) -> None:
            self.modules: list[str] = []
            self.closed = False

        def start(self, modules: list[str]) -> None:
            self.modules = list(modules)
            events.append(f"start {','.join(modules)}")

        def close(self) -> None:
            self.closed = True
            events.append(f"close {','.join(self.modules)}")

    given: dict[str, FakePool | None] = {}

    class FakeRun:
        def __init__(self, spec: RunSpec, run_dir: Path, *, runs_before: int = 0, warm: FakePool | None = None,
                     after_traffic: Callable[[], None] | None = None, router: object = None) -> None:
            self.spec, self.run_dir, self.after_traffic = spec, run_dir, after_traffic
            given[spec.name] = warm

        def execute(self) -> outcome.RunOutcome:
            events.append(f"traffic {self.spec.name}")
            if self.after_traffic is not None and not self.spec.name.endswith("fails"):
                self.after_traffic()
            events.append(f"collected {self.spec.name}")
            return outcome.RunOutcome(self.spec.name, "completed", "", 0.0, self.run_dir)

    runs = expand(BASE)
    names = [r.name for r in runs]
    monkeypatch.setattr(runner, "Run", FakeRun)
    monkeypatch.setattr(runner, "WarmPool", FakePool)
    monkeypatch.setattr(runner, "warm_modules", lambda spec: [f"mod-{spec.name}"])
    monkeypatch.setattr(runner, "run_lock", contextlib.nullcontext)
    monkeypatch.setattr(runner, "is_completed", lambda run_dir, _text: run_dir.name == names[1])
    monkeypatch.delenv("NEST_EXP_WARM", raising=False)
    runner.run_sweep(runs, results_root=tmp_path, out=io.StringIO())
    ran = [names[0], *names[2:]]
    assert given[ran[0]] is None  # the first run starts its own
    for before, after in itertools.pairwise(ran):  # the completed run is passed over
        pool = given[after]
        assert pool is not None and pool.modules == [f"mod-{after}"] and not pool.closed
        assert events.index(f"start mod-{after}") == events.index(f"traffic {before}") + 1  # before its collection
    assert not any(e.startswith("close") for e in events)  # every pool went to its run
    assert sum(e.startswith("start") for e in events) == len(ran) - 1  # the last run starts none

    events.clear()
    given.clear()
    monkeypatch.setattr(runner, "is_completed", lambda _dir, _text: False)
    failing = [dataclasses.replace(r, name=f"{r.name}-fails") if i == 0 else r for i, r in enumerate(runs[:2])]
    runner.run_sweep(failing, results_root=tmp_path, out=io.StringIO())  # a run that failed before its traffic ended
    assert given[failing[1].name] is None and not any(e.startswith("start") for e in events)

    events.clear()
    given.clear()
    runner.run_sweep(runs[:2], results_root=tmp_path, out=io.StringIO(), warmup_s=3)  # the warm-up starts the first's
    assert events[:2] == [f"traffic warmup-{runs[0].name}", f"start mod-{runs[0].name}"]
    first = given[runs[0].name]
    assert first is not None and first.modules == [f"mod-{runs[0].name}"]

    events.clear()
    monkeypatch.setenv("NEST_EXP_WARM", "0")  # nothing starts warm
    runner.run_sweep(runs, results_root=tmp_path, out=io.StringIO())
    assert not any(e.startswith("start") for e in events)


def test_a_pool_started_for_another_run_is_released(monkeypatch: pytest.MonkeyPatch) -> None:
    from nest_experiments.runs import runner

    closed: list[str] = []

    class FakePool:
        def start(self, modules: list[str]) -> None:
            self.modules = modules

        def close(self) -> None:
            closed.append(self.modules[0])

    runs = expand(BASE)
    monkeypatch.setattr(runner, "WarmPool", FakePool)
    monkeypatch.setattr(runner, "warm_modules", lambda spec: [f"mod-{spec.name}"])
    monkeypatch.setattr(runner, "is_completed", lambda _dir, _text: False)
    monkeypatch.delenv("NEST_EXP_WARM", raising=False)
    nxt = runner._WarmNext(runs, Path("/nonexistent"))
    start = nxt.starter(0)
    assert start is not None and nxt.starter(len(runs) - 1) is None
    start()
    assert nxt.take(runs[2]) is None and closed == [f"mod-{runs[1].name}"]  # not the run it was started for
    start()
    nxt.close()
    assert closed == [f"mod-{runs[1].name}"] * 2


def test_only_takes_run_names_as_check_lists_them_with_or_without_the_experiment() -> None:
    from dataclasses import replace

    from nest_experiments.errors import NestExpError
    from nest_experiments.runs.launch import load_runs
    from nest_experiments.runs.request import RunRequest

    root = Path(__file__).resolve().parents[2]
    req = RunRequest(experiment=root / "experiments" / "racing_firewall.toml",
                     only=("racing_firewall/forward-2mbit-pfifo-60_action-shape_racing-dynamic_r1",
                           "forward-dvl-0.25-pfifo-60_action-accept_racing-chromium_r1"))
    _, runs = load_runs(req)
    assert sorted(r.name for r in runs) == ["forward-2mbit-pfifo-60_action-shape_racing-dynamic_r1",
                                            "forward-dvl-0.25-pfifo-60_action-accept_racing-chromium_r1"]
    req = replace(req, only=("other_experiment/forward-2mbit-pfifo-60_action-shape_racing-dynamic_r1",))
    with pytest.raises(NestExpError, match="--only: no run named other_experiment/"):
        load_runs(req)
