"""The object-download schedule, per-object metrics and the ``objects`` app's configuration (pure)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nest_experiments.apps import objects_client as objects
from nest_experiments.apps.objects import design, design_argv
from nest_experiments.config import ObjectsApp, parse_experiment
from nest_experiments.dash.core.fetch import Fetcher, FetchResult
from nest_experiments.errors import ConfigError
from nest_experiments.studies.under_hood.metrics import jain_index

MB = 1024**2


def test_sequential_schedule_is_seeded_uniform_sizes_in_range_with_fixed_pauses() -> None:
    d = objects.Design(requests=40, sessions=3, seed=1)
    plan = objects.schedule(d)
    assert len(plan) == 120 and plan == objects.schedule(d)  # same design, same schedule
    assert [(r.session, r.index) for r in plan[:2]] == [(1, 0), (1, 1)] and plan[40].session == 2
    assert all(2 * MB <= r.size <= 50 * MB and r.size % 1024 == 0 for r in plan)
    assert {r.pause_s for r in plan if r.index} == {0.5} and {r.pause_s for r in plan if not r.index} == {0.0}
    sizes = [r.size for r in plan]
    assert min(sizes) < 8 * MB and max(sizes) > 44 * MB  # spread over the range, not clustered
    assert len({tuple(r.size for r in plan if r.session == s) for s in (1, 2, 3)}) == 3  # each session its own draw
    assert [r.size for r in objects.schedule(objects.Design(requests=40, sessions=3, seed=2))] != sizes


def test_parallel_schedule_draws_each_stream_and_pause_range() -> None:
    d = objects.Design(mode="parallel", streams=2, requests=30, size_min=MB, size_max=8 * MB, pause_min_s=0.5,
                       pause_max_s=8.0, seed=1)
    plan = objects.schedule(d)
    s1 = [r for r in plan if r.stream == "s1"]
    s2 = [r for r in plan if r.stream == "s2"]
    assert len(s1) == len(s2) == 30 and [r.size for r in s1] != [r.size for r in s2]
    pauses = [r.pause_s for r in plan if r.index]
    assert all(0.5 <= p <= 8.0 for p in pauses) and max(pauses) - min(pauses) > 4
    assert s1[0].path == f"/obj-{s1[0].size}.bin"


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"size_min": 5, "size_max": 4}, "sizes"), ({"pause_min_s": 2.0, "pause_max_s": 1.0}, "pause"),
    ({"mode": "parallel"}, "streams"), ({"streams": 2}, "streams"), ({"requests": 0}, "requests"),
    ({"mode": "burst"}, "mode"),
])
def test_bad_designs_name_the_setting(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        objects.Design(**kwargs)
    assert err.value.path == key


def test_make_files_are_sparse_and_exactly_sized(tmp_path: Any) -> None:
    paths = objects.make_files(tmp_path, [1000, 3 * MB])
    assert [p.stat().st_size for p in paths] == [1000, 3 * MB]
    assert paths[1].stat().st_blocks * 512 < MB  # sparse: no blocks for the zeros


def _result(**kw: Any) -> FetchResult:
    base = {"path": "/obj-1000.bin", "status": 200, "bytes": 1000, "t_request": 1.0, "t_first_byte": 1.25,
            "t_last_byte": 1.5, "transport": "tcp"}
    return FetchResult(**{**base, **kw})


def test_object_row_throughput_over_first_to_last_byte_and_latency_to_first_byte() -> None:
    req = objects.ObjectRequest(session=1, stream="objects", index=0, size=1000, pause_s=0.0)
    row = objects.object_row(req, _result())
    assert row["throughput_bps"] == 8 * 1000 / 0.25 and row["latency_s"] == 0.25
    assert objects.object_row(req, _result(t_last_byte=1.25))["throughput_bps"] == ""  # one read: no rate


def test_jain_index() -> None:
    assert jain_index([5.0, 5.0]) == 1.0
    assert jain_index([10.0, 0.0]) == 0.5
    assert jain_index([3.0, 1.0]) == pytest.approx(16 / 20)
    assert jain_index([]) is None and jain_index([0.0, 0.0]) is None


class FakeFetcher(Fetcher):
    """Serves every path at once with its size taken from the name; records what it was asked."""

    def __init__(self, clock: list[float], log: list[tuple[str, str]]) -> None:
        self.clock, self.log, self.closed = clock, log, False

    async def fetch(self, stream: str, path: str) -> FetchResult:
        self.log.append((stream, path))
        size = int(path.split("-")[1].split(".")[0])
        t = self.clock[0]
        self.clock[0] += 0.1
        return _result(path=path, bytes=size, t_request=t, t_first_byte=t + 0.01, t_last_byte=t + 0.1)

    async def close(self) -> None:
        self.closed = True


def test_run_design_fetches_the_schedule_session_by_session_and_stops_at_the_budget() -> None:
    clock, log, opened = [0.0], [], []

    async def opener() -> Fetcher:
        opened.append(FakeFetcher(clock, log))
        return opened[-1]

    d = objects.Design(requests=3, sessions=2, pause_min_s=0.0, pause_max_s=0.0, size_min=1000, size_max=5000)
    prog = objects.Progress(rows=[], stop_at=float("inf"))
    asyncio.run(objects.run_design(d, opener, clock=lambda: clock[0], prog=prog))
    assert [p for _, p in log] == [r.path for r in objects.schedule(d)]
    assert len(opened) == 2 and all(f.closed for f in opened)  # fresh connections per session
    assert [r["size"] for r in prog.rows] == [r.size for r in objects.schedule(d)]
    clock[0], log[:] = 0.0, []
    short = objects.Progress(rows=[], stop_at=0.25)  # time for three requests
    asyncio.run(objects.run_design(d, opener, clock=lambda: clock[0], prog=short))
    assert len(short.rows) == 3 and short.skipped == 3


def _exp(app: dict[str, Any]) -> ObjectsApp:
    raw = {"experiment": {"name": "o", "topology": "dumbbell", "duration": "60s"},
           "apps": {"o": {"kind": "objects", "server": "h1", "client": "s1", **app}}}
    (cfg,) = parse_experiment(raw).apps
    assert isinstance(cfg, ObjectsApp)
    return cfg


def test_objects_app_config_defaults_are_the_papers_download_sessions() -> None:
    c = _exp({})
    assert (c.mode, c.requests, c.size_min, c.size_max, c.pause_min_s, c.streams, c.http_server) == \
        ("sequential", 40, 2 * MB, 50 * MB, 0.5, 1, "caddy")
    p = _exp({"mode": "parallel", "sizes": ["1mb", "8mb"], "pause": ["500ms", "8s"], "transport": "h3"})
    assert (p.streams, p.size_min, p.size_max, p.pause_min_s, p.pause_max_s) == (2, MB, 8 * MB, 0.5, 8.0)
    # the client gets the same design (exact bytes and microseconds)
    args = objects._parser().parse_args(["plan", *design_argv(p)])
    assert objects.design_of(args) == design(p)


@pytest.mark.parametrize(("app", "key", "words"), [
    ({"sizez": "1mb"}, "apps.o.sizez", "did you mean 'sizes'"),
    ({"sizes": ["8mb", "1mb"]}, "apps.o.sizes", "above max"),
    ({"sizes": ["0b", "1mb"]}, "apps.o.sizes", "at least 1b"),
    ({"pause": ["1s", "2s", "3s"]}, "apps.o.pause", "[min, max]"),
    ({"streams": 3}, "apps.o.streams", "'parallel' only"),
    ({"mode": "parallel", "streams": 1}, "apps.o.streams", ">= 2"),
    ({"transport": "mptcp"}, "apps.o.transport", "is not one of"),
    ({"http_server": "nginx"}, "apps.o.http_server", "is not one of"),
    ({"requests": 40, "sessions": 3, "pause": "1s"}, "apps.o.requests", "more than the run's 60 s"),
])
def test_bad_objects_keys_are_refused_naming_the_key(app: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        _exp(app)
    assert err.value.path == key and words in str(err.value)
