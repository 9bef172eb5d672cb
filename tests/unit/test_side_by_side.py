"""net.procs.side_by_side: independent jobs (the namespaces' ip/tc batches) run at once; a failure still raises."""

from __future__ import annotations

import threading

import pytest

from nest_experiments.errors import NetworkSetupError
from nest_experiments.net.procs import side_by_side


def test_the_jobs_run_at_the_same_time() -> None:
    barrier = threading.Barrier(3, timeout=5.0)  # one after another, the first job would wait here forever (5 s)
    threads: set[int] = set()

    def job() -> None:
        threads.add(threading.get_ident())
        barrier.wait()

    side_by_side([job, job, job])
    assert len(threads) == 3 and threading.get_ident() not in threads


def test_every_job_ends_and_the_first_failure_in_order_is_raised() -> None:
    done: list[str] = []
    started = threading.Barrier(3, timeout=5.0)

    def ok() -> None:
        started.wait()
        done.append("ok")

    def fails(name: str) -> None:
        started.wait()
        done.append(name)
        raise NetworkSetupError(f"{name} failed")

    with pytest.raises(NetworkSetupError, match="first failed"):
        side_by_side([lambda: fails("first"), ok, lambda: fails("second")])
    assert sorted(done) == ["first", "ok", "second"]  # the others were not abandoned


def test_one_job_runs_in_the_callers_thread() -> None:
    seen: list[int] = []
    side_by_side([lambda: seen.append(threading.get_ident())])
    side_by_side([])
    assert seen == [threading.get_ident()]
