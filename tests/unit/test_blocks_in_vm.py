"""runs.blocks_in_vm: the blocks of --until-decided handed to one guest through an inbox (the guest simulated here
by :func:`serve` in this process; tests/integration/test_vm.py runs it in a real VM)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.config.sweep import RunSpec
from nest_experiments.errors import RunError
from nest_experiments.runs.blocks_in_vm import Blocks, command_file, done_file, drive_in_vm, serve
from nest_experiments.runs.until_decided import Budget, run_until_decided
from tests.unit.test_until_decided import RAW, STUDY, Runner


def _names(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--only"]


def test_serve_runs_each_block_in_order_with_its_environment(tmp_path: Path) -> None:
    for block, names in ((1, ["a", "b"]), (2, ["c"])):
        command_file(tmp_path, block).write_text(json.dumps({"argv": ["run", *[x for n in names for x in ("--only", n)]],
                                                             "env": {"NEST_EXP_SWEEP_ID": f"id{block}"}}))
    (tmp_path / "stop").write_text("{}")
    seen: list[tuple[list[str], dict[str, str]]] = []

    def run(argv: list[str], env: dict[str, str]) -> int:
        seen.append((_names(argv), env))
        return len(seen) - 1  # exit codes 0, 1

    assert serve(tmp_path, run, sleep=lambda s: None) == 0
    assert seen == [(["a", "b"], {"NEST_EXP_SWEEP_ID": "id1"}),
                    (["c"], {"NEST_EXP_SWEEP_ID": "id2"})]
    assert [json.loads(done_file(tmp_path, b).read_text()) for b in (1, 2)] == [{"exit_code": 0}, {"exit_code": 1}]


def test_serve_waits_for_the_next_command_before_it_looks_for_stop(tmp_path: Path) -> None:
    (tmp_path / "stop").write_text("{}")
    command_file(tmp_path, 1).write_text(json.dumps({"argv": ["run"]}))
    runs: list[list[str]] = []
    assert serve(tmp_path, lambda argv, env: runs.append(argv) or 0, sleep=lambda s: None) == 0
    assert runs == [["run"]]  # a command already there runs even when stop is there too


def _guest(inbox: Path, folder: Path, runner: Runner, by_name: dict[str, RunSpec]) -> int:
    """The guest's side in this process: serve the inbox, each block's runs written by ``runner``."""
    return serve(inbox, lambda argv, env: runner([by_name[n] for n in _names(argv)]), poll_s=0.01)


def test_until_decided_through_one_guest_gives_the_blocks_and_verdicts_of_separate_sweeps(tmp_path: Path) -> None:
    from nest_experiments.runs.until_decided import block_runs

    inbox, one_vm, separate = tmp_path / "inbox", tmp_path / "one_vm", tmp_path / "separate"
    inbox.mkdir()
    by_name = {r.name: r for b in range(1, 9) for r in block_runs(RAW, b)}
    after: list[tuple[list[str], dict[str, Any]]] = []
    runner = Runner(one_vm)
    blocks = Blocks(inbox, block_argv=lambda runs: ["run", *[x for r in runs for x in ("--only", r.name)]],
                    after_block=lambda runs, record: after.append((sorted(r.name for r in runs), dict(record))),
                    poll_s=0.01)
    verdicts: list[Any] = []

    def drive(execute: Any) -> None:
        verdicts.append(run_until_decided(RAW, folder=one_vm, execute=execute, budget=Budget(max_reps=8),
                                          out=__import__("io").StringIO(), study=STUDY))

    assert drive_in_vm(blocks, drive, lambda: _guest(inbox, one_vm, runner, by_name)) == 0
    reference = Runner(separate)
    expected = run_until_decided(RAW, folder=separate, execute=reference, budget=Budget(max_reps=8),
                                 out=__import__("io").StringIO(), study=STUDY)
    assert runner.blocks == reference.blocks and len(runner.blocks) >= 2  # the same blocks, the same runs
    assert [v.verdict for v in verdicts[0]] == [v.verdict for v in expected]
    assert [names for names, _ in after] == runner.blocks  # the host's work after each block, on its runs
    assert all(record["vm"] >= 0 and record["block"] == i + 1 for i, (_, record) in enumerate(after))
    assert (inbox / "stop").exists()  # the guest was told to power off


def test_a_driver_that_fails_stops_the_guest_and_its_error_comes_out_after_the_vm(tmp_path: Path) -> None:
    blocks = Blocks(tmp_path, block_argv=lambda runs: ["run"], after_block=lambda runs, record: None, poll_s=0.01)
    order: list[str] = []

    def drive(execute: Any) -> None:
        execute([])
        raise ValueError("judging failed")

    def guest() -> int:
        code = serve(tmp_path, lambda argv, env: 0, poll_s=0.01)
        order.append("vm down")
        return code

    with pytest.raises(ValueError, match="judging failed"):
        drive_in_vm(blocks, drive, guest)
    assert order == ["vm down"] and (tmp_path / "stop").exists()


def test_a_vm_that_ends_first_fails_the_waiting_block_with_why(tmp_path: Path) -> None:
    blocks = Blocks(tmp_path, block_argv=lambda runs: ["run"], after_block=lambda runs, record: None, poll_s=0.01)
    waiting = threading.Event()

    def drive(execute: Any) -> None:
        waiting.set()
        execute([])  # nobody serves it

    def dead_vm() -> None:
        waiting.wait(5)
        raise TimeoutError("qemu killed after 600 s")

    with pytest.raises(TimeoutError):
        drive_in_vm(blocks, drive, dead_vm)
    failed: list[BaseException] = []
    blocks2 = Blocks(tmp_path / "x", block_argv=lambda runs: ["run"], after_block=lambda r, c: None, poll_s=0.01)
    (tmp_path / "x").mkdir()

    def drive2(execute: Any) -> None:
        try:
            execute([])
        except RunError as exc:
            failed.append(exc)
            raise

    with pytest.raises(RunError, match="the VM ended before block 1 finished"):
        drive_in_vm(blocks2, drive2, lambda: 0)  # the guest powered off without serving
    assert failed
