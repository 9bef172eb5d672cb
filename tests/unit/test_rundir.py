"""RunFolder, the one reader of a run folder: what a missing, empty or unreadable file reads as."""

from __future__ import annotations

import json
from pathlib import Path

from nest_experiments import rundir
from nest_experiments.rundir import RunFolder, experiment_name, run_dirs, write_csv, write_failed_run

REAL = Path(__file__).resolve().parents[1] / "data" / "run_folders" / "cluster_short"  # a cluster sweep's folders


def test_a_stored_run_folder_reads_through_its_accessors() -> None:
    run = RunFolder(REAL / "qdisc-pfifo-20_r1")
    assert run.completed() and run.manifest() is not None
    assert run.config()["experiment"]["name"] == experiment_name(REAL)
    assert run.egresses() and {"link", "node", "dev"} <= set(run.egresses()[0])
    assert run.iperf3_summary() and float(run.iperf3_summary()[0]["bytes"]) > 0
    qdisc = run.qdisc()
    assert not qdisc.empty and {"t", "node", "dev", "backlog_pkts"} <= set(qdisc.columns)
    flows = run.frame(rundir.IPERF3)
    assert flows is not None and len(flows) == len(run.iperf3()) > 0


def test_absent_files_read_as_empty_and_has_says_so(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    assert not run.has(rundir.SEGMENTS)
    assert run.manifest() is None and not run.completed()
    assert run.config() == {} and run.egresses() == [] and run.qoe() is None
    assert run.rows(rundir.RATES) == [] and run.racing() == []
    assert run.frame(rundir.QDELAY) is None and run.qdisc().empty


def test_unreadable_or_odd_files_read_as_empty(tmp_path: Path) -> None:
    (tmp_path / rundir.CONFIG).write_text("this is = not [toml")
    (tmp_path / rundir.QOE).write_text(json.dumps(["a", "list"]))
    (tmp_path / rundir.QDELAY).write_text("")
    run = RunFolder(tmp_path)
    assert run.config() == {}
    assert run.qoe() is None  # qoe.json maps app names to documents
    empty = run.frame(rundir.QDELAY)
    assert empty is not None and empty.empty  # present but empty: not None


def test_rows_are_the_csv_as_written(tmp_path: Path) -> None:
    write_csv(tmp_path / rundir.RATES, ("t", "rate_bps"), [{"t": 1.5, "rate_bps": 1000}])
    assert RunFolder(tmp_path).rows(rundir.RATES) == [{"t": "1.5", "rate_bps": "1000"}]


def test_a_failed_run_folder_is_found_and_named_by_its_config(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    write_failed_run(sweep / "r1", config_text='[experiment]\nname = "mine"\n', manifest={"reason": "lost"})
    assert run_dirs(sweep) == [sweep / "r1"] and run_dirs(sweep / "r1") == [sweep / "r1"]
    assert RunFolder(sweep / "r1").manifest() == {"schema_version": rundir.SCHEMA_VERSION, "warnings": [],
                                                   "versions": {}, "reason": "lost", "status": "failed"}
    assert experiment_name(sweep) == "mine"
    assert experiment_name(tmp_path / "empty") == "empty"  # no run config: the folder's name


def test_a_completed_run_stays_completed_when_the_file_only_resizes_the_sweep(tmp_path: Path) -> None:
    def text(repetitions: int = 2, duration: str = "130s", paper: str = "330s", seed: int = 1) -> str:
        return rundir.dump_toml({"experiment": {"name": "x", "duration": duration, "repetitions": repetitions},
                                 "paper": {"experiment.duration": paper},
                                 "run": {"name": "a_r1", "repetition": 1, "seed": seed}})

    run = tmp_path / "a_r1"
    run.mkdir()
    (run / rundir.CONFIG).write_text(text())
    rundir.write_json(run / rundir.MANIFEST, {"status": "completed"})
    assert rundir.is_completed(run, text())
    assert rundir.is_completed(run, text(repetitions=3)) and rundir.is_completed(run, text(paper="600s"))
    assert not rundir.is_completed(run, text(duration="60s"))  # a different run: resume runs it again
    assert not rundir.is_completed(run, text(seed=2))
    assert not rundir.same_run(text(), "[experiment\n")


def test_a_manifest_of_another_schema_is_a_one_line_error_naming_the_folder_and_the_fix(tmp_path: Path) -> None:
    import pytest

    from nest_experiments.errors import NestExpError

    (tmp_path / rundir.MANIFEST).write_text(json.dumps({"status": "completed"}))  # before it was written: 1
    assert RunFolder(tmp_path).completed()
    for version, fix in ((rundir.SCHEMA_VERSION + 1, "newer than .*: update nest_experiments"),
                         (0, "older than .*: run it again"), ("x", "not a number")):
        (tmp_path / rundir.MANIFEST).write_text(json.dumps({"schema_version": version, "status": "completed"}))
        with pytest.raises(NestExpError, match=f"^{tmp_path}: .*{fix}") as err:
            RunFolder(tmp_path).manifest()
        assert "\n" not in str(err.value)


def test_the_raw_files_are_named_by_app_and_the_writers_are_atomic(tmp_path: Path) -> None:
    assert rundir.app_file("video", rundir.CLIENT, rundir.ERR) == "video.client.err"
    assert rundir.app_file("video", rundir.CA) == "video.ca.pem"
    rundir.write_bytes_atomic(tmp_path / "a.bin", b"\x00\x01")
    rundir.write_atomic(tmp_path / "b.txt", "text\n")
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01" and (tmp_path / "b.txt").read_text() == "text\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.txt"]  # no temp file left


def test_no_module_spells_a_run_folder_file_name() -> None:
    """Every name of a run folder's file comes from rundir (the contract's one owner)."""
    import re

    package = Path(rundir.__file__).resolve().parents[1]
    names = sorted({v for k, v in vars(rundir).items() if k.isupper() and isinstance(v, str) and "." in v})
    quoted = re.compile("[\"'](" + "|".join(re.escape(n) for n in names) + ")[\"']")
    allowed = {"dash/origin/certs.py"}  # its own temp folder's ca.pem (not a run folder's)
    hits = [f"{p.relative_to(package)}:{i}" for p in package.rglob("*.py") if "rundir" not in p.parts
            and str(p.relative_to(package)) not in allowed
            for i, line in enumerate(p.read_text().splitlines(), 1) if quoted.search(line)]
    assert hits == []
