"""The cluster sweep's logic without a cluster: addresses, payloads, unpacking run folders, the re-send policy,
progress lines, and the machine's emulation lock (exclusive vs shared)."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from distributed.scheduler import KilledWorker

from nest_experiments.config import read_toml
from nest_experiments.config.sweep import expand
from nest_experiments.errors import NestExpError
from nest_experiments.net import procs
from nest_experiments.rundir import is_completed, read_manifest
from nest_experiments.runs import cluster
from nest_experiments.runs.cluster_task import pack, payload_for, spec_from_payload
from nest_experiments.runs.outcome import config_text
from nest_experiments.runs.progress import Progress

SHORT = Path(__file__).resolve().parents[1] / "data" / "cluster" / "short_sweep.toml"


def test_cluster_addresses() -> None:
    assert cluster.parse_cluster("local:3") == ("local", 3)
    assert cluster.parse_cluster("tcp://10.0.0.5:8786") == ("tcp://10.0.0.5:8786", 0)
    for bad, words in (("local:0", "at least 1"), ("local", "local:N"), ("local:x", "local:N"),
                       ("10.0.0.5:8786", "tcp://HOST:8786")):
        with pytest.raises(NestExpError, match=words):
            cluster.parse_cluster(bad)


def test_payload_gives_the_same_run_on_the_worker() -> None:
    spec = expand(read_toml(SHORT))[2]
    payload = json.loads(json.dumps(payload_for(spec, config_text=config_text(spec), runtime="auto",
                                                cluster={"scheduler": "tcp://x:1"})))  # it crosses the network
    again = spec_from_payload(payload)
    assert (again.name, again.repetition, again.position, again.point) == (spec.name, spec.repetition,
                                                                             spec.position, spec.point)
    assert config_text(again) == config_text(spec)
    with pytest.raises(NestExpError, match="same nest_experiments version"):
        spec_from_payload({**payload, "config_text": config_text(spec) + "# other\n"})


def _run_folder(root: Path, name: str, status: str = "completed") -> Path:
    d = root / name
    (d / "raw").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"status": status, "run": name}))
    (d / "config.toml").write_text("x = 1\n")
    (d / "raw" / "iperf3.json").write_text("{}")
    return d


def test_install_puts_a_run_folder_in_place_whole(tmp_path: Path) -> None:
    src = tmp_path / "worker"
    _run_folder(src, "a_r1")
    folder = tmp_path / "results" / "exp"
    _run_folder(folder, "a_r1", status="failed")  # an earlier failed run is replaced
    cluster.install(folder, "a_r1", pack(src, "a_r1"))
    assert read_manifest(folder / "a_r1") == {"status": "completed", "run": "a_r1"}
    assert (folder / "a_r1" / "raw" / "iperf3.json").read_text() == "{}"
    assert [p.name for p in folder.iterdir()] == ["a_r1"]  # no unpacking folder, no old copy


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize(("members", "words"), [
    ({"a_r1/manifest.json": b"{}", "b_r1/manifest.json": b"{}"}, "outside it"),
    ({"a_r1/../../evil": b"x"}, "outside it"),
    ({"a_r1/config.toml": b"x = 1"}, "no readable manifest"),
])
def test_install_refuses_a_bad_tar_and_leaves_nothing(tmp_path: Path, members: dict[str, bytes], words: str) -> None:
    with pytest.raises(NestExpError, match=words):
        cluster.install(tmp_path, "a_r1", _tar(members))
    assert list(tmp_path.iterdir()) == []
    assert not (tmp_path.parent / "evil").exists()


PAYLOAD = {"experiment": "exp", "name": "a_r1", "repetition": 1, "position": 3, "point": [["k", "v"]],
           "config_text": "[experiment]\nname = \"exp\"\n", "cluster": {"scheduler": "tcp://x:1"}}


def test_record_failed_writes_a_folder_that_says_why(tmp_path: Path) -> None:
    cluster.record_failed(tmp_path, PAYLOAD, "the worker running it was lost twice")
    m = read_manifest(tmp_path / "a_r1")
    assert m is not None and m["status"] == "failed" and m["reason"] == "the worker running it was lost twice"
    assert m["point"] == {"k": "v"} and m["position"] == 3 and m["cluster"] == {"scheduler": "tcp://x:1"}
    assert (tmp_path / "a_r1" / "config.toml").read_text() == PAYLOAD["config_text"]
    assert not is_completed(tmp_path / "a_r1", PAYLOAD["config_text"])  # resume sends it again


@dataclass
class FakeFuture:
    status: str
    exc: BaseException | None = None
    value: Any = None

    def exception(self) -> BaseException | None:
        return self.exc

    def result(self) -> Any:
        return self.value


def _killed() -> KilledWorker:
    worker = SimpleNamespace(address="tcp://127.0.0.1:1")
    return KilledWorker(task="nx-a_r1-1", last_worker=worker, allowed_failures=0)  # type: ignore[arg-type]


def _tracker() -> cluster._Tracker:
    spec = expand(read_toml(SHORT))[0]
    return cluster._Tracker(specs={"a_r1": spec}, payloads={"a_r1": PAYLOAD}, sends={"a_r1": 1})


def test_a_run_whose_worker_dies_is_sent_again_once_then_failed(tmp_path: Path) -> None:
    tracker, out = _tracker(), io.StringIO()
    progress = Progress(total=1, out=out)
    lost = FakeFuture(status="error", exc=_killed())
    tracker.started["a_r1"] = False  # lost while waiting: sent again, not counted
    assert cluster._finished(lost, "a_r1", tracker, tmp_path, progress) is None
    assert tracker.losses == {}
    tracker.started["a_r1"] = True
    tracker.where["a_r1"] = "worker w1"
    assert cluster._finished(lost, "a_r1", tracker, tmp_path, progress) is None
    assert "a_r1: the worker running it was lost (worker w1" in out.getvalue()
    tracker.sends["a_r1"] = 2
    tracker.where["a_r1"] = "worker w2"
    result = cluster._finished(lost, "a_r1", tracker, tmp_path, progress)
    assert result is not None and result.status == "failed"
    assert result.reason.startswith("the worker running it was lost twice (worker w1, ")
    assert "worker w2" in result.reason and result.reason.endswith("KilledWorker")
    assert read_manifest(tmp_path / "a_r1")["reason"] == result.reason  # type: ignore[index]
    assert "[1/1 done] a_r1: failed in " in out.getvalue()


def test_a_task_error_is_recorded_at_once(tmp_path: Path) -> None:
    tracker = _tracker()
    tracker.started["a_r1"] = True
    result = cluster._finished(FakeFuture(status="error", exc=ModuleNotFoundError("no module named x")),
                               "a_r1", tracker, tmp_path, Progress(total=1, out=io.StringIO()))
    assert result is not None and result.status == "failed"
    assert result.reason == "the task failed on the cluster: ModuleNotFoundError: no module named x"


def test_a_run_process_that_died_is_recorded_with_its_last_words(tmp_path: Path) -> None:
    value = {"worker": "worker w1", "seconds": 2.5, "tar": b"", "exit": -9, "stderr": ["building", "Killed"]}
    result = cluster._finished(FakeFuture(status="finished", value=value), "a_r1", _tracker(), tmp_path,
                               Progress(total=1, out=io.StringIO()))
    assert result is not None and result.status == "failed" and result.seconds == 2.5
    assert result.reason == "the run's process on worker w1 exited with -9: building | Killed"


def test_progress_lines_and_time_left() -> None:
    out = io.StringIO()
    p = Progress(total=5, slots=2, out=out)
    p.skip("a_r1")
    p.start("b_r1", duration_s=30, where="worker w1")
    p.start("c_r1", duration_s=30, where="worker w2")
    assert p.eta_s() is None
    p.end("b_r1", status="completed", seconds=40.0, where="worker w1")
    assert p.eta_s() == pytest.approx(40.0 * 3 / 2)  # 3 runs left, 2 at once
    p.end("c_r1", status="failed", seconds=20.0, where="worker w2", reason="boom")
    assert p.eta_s() == pytest.approx(30.0 * 2 / 2)
    lines = out.getvalue().splitlines()
    assert lines == ["[1/5] a_r1: completed earlier, skipped",
                     "[1/5 done] b_r1: running (30 s) on worker w1",
                     "[1/5 done] c_r1: running (30 s) on worker w2",
                     "[2/5 done] b_r1: completed in 40.0 s on worker w1, about 1.0 min left",
                     "[3/5 done] c_r1: failed in 20.0 s on worker w2: boom, about 0.5 min left"]


def test_one_machine_sweep_and_cluster_runs_exclude_each_other(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procs, "STATE_DIR", tmp_path)
    with procs.run_lock(shared=True), procs.run_lock(shared=True):  # workers side by side
        with pytest.raises(NestExpError, match="cluster workers on this machine"), procs.run_lock():
            pass
    with procs.run_lock():
        with pytest.raises(NestExpError, match=r"one-machine nest_experiments sweep is active \(pid \d+\)"), \
                procs.run_lock(shared=True):
            pass
        with pytest.raises(NestExpError, match=r"another nest_experiments run is active"), procs.run_lock():
            pass
    with procs.run_lock(shared=True):  # all released
        pass
