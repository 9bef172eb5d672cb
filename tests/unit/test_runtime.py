"""runtime: the one read of "am I the VM's guest?", the guest's environment, and choosing a runtime."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from nest_experiments.config.sweep import expand
from nest_experiments.runs import runtime
from nest_experiments.runs.outcome import RunOutcome, exit_code, sweep_summary

RAW = {"experiment": {"name": "rt", "topology": "dumbbell", "duration": "5s"},
       "links": {"bottleneck": {"rate": "10mbit", "qdisc": {"kind": "pie"}}}}


@pytest.fixture(autouse=True)
def _no_runtime_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key == runtime.ENV or key.startswith(runtime.VM_ENV_PREFIX):
            monkeypatch.delenv(key)


def test_the_host_until_the_environment_says_vm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEST_EXP_VM_WARMUP_S", "30")  # a VM setting outside the guest counts for nothing
    assert (runtime.current(), runtime.vm_settings(), runtime.warmup_s()) == ("host", {}, 0.0)
    monkeypatch.setenv(runtime.ENV, "vm")
    monkeypatch.setenv("NEST_EXP_VM_ACCEL", "tcg")
    assert runtime.current() == "vm"
    assert runtime.vm_settings() == {"warmup_s": "30", "accel": "tcg"} and runtime.warmup_s() == 30.0


def test_the_guests_environment_is_read_back_as_its_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    settings = {"NEST_EXP_VM_ACCEL": "kvm", "NEST_EXP_VM_WARMUP_S": "0"}
    env = runtime.guest_env(settings, keep=("CI", "NOT_SET_ANYWHERE"))
    assert env == {runtime.ENV: "vm", "CI": "true", **settings, "PYTHONDONTWRITEBYTECODE": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert runtime.current() == "vm" and runtime.vm_settings() == {"accel": "kvm", "warmup_s": "0"}


def test_inside_the_guest_every_choice_is_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runtime.ENV, "vm")
    runs = expand(RAW)
    assert {runtime.choose(w, runs) for w in ("auto", "host", "vm")} == {"host"}
    monkeypatch.delenv(runtime.ENV)
    assert runtime.choose("vm", runs) == "vm"  # on the host, a wanted VM is the VM


def test_a_failed_run_makes_the_exit_status_1_and_the_summary_counts_it() -> None:
    done, failed = (RunOutcome("a", s, "", 1.0, Path("x")) for s in ("completed", "failed"))
    assert (exit_code([done]), exit_code([done, failed]), exit_code([])) == (0, 1, 0)
    assert sweep_summary([done, failed], 12.3, Path("/r/e")) == "1 completed, 0 skipped, 1 failed in 12 s; results in /r/e"


def test_a_vm_sweep_holds_the_host_s_emulation_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guest has its own /run (and lock): the host takes the machine's lock for the VM's whole sweep, so that
    no host emulation starts beside it; the sweep's host record goes to sweeps.jsonl."""
    from nest_experiments.errors import NestExpError
    from nest_experiments.net import procs
    from nest_experiments.runs import launch, sweep_in_vm
    from nest_experiments.runs.phases import read_sweep_records
    from nest_experiments.runs.request import RunRequest

    monkeypatch.setattr(procs, "STATE_DIR", tmp_path / "state")
    seen: list[str] = []

    def fake_guest(argv: list[str], runs: list[Any], results: Path, *, record: dict[str, Any]) -> int:
        with pytest.raises(NestExpError, match="another nest_experiments run is active"), procs.run_lock():
            pass
        seen.append(argv[3])
        record.update(vm=12.5, boot=4.0)
        return 0

    monkeypatch.setattr(sweep_in_vm, "run_in_guest", fake_guest)
    req = RunRequest(plot=False)
    runs = launch.load_runs(RunRequest())[1]
    assert launch._run_in_vm(req, runs, tmp_path / "results") == 0
    assert seen == ["run"]
    with procs.run_lock():  # released after the VM
        pass
    [record] = read_sweep_records(tmp_path / "results" / runs[0].experiment.name)
    assert record["side"] == "vm_host" and record["vm"] == 12.5 and record["runs"] == len(runs) > 1
