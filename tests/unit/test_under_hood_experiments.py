"""experiments/under_hood_*.toml: the under-the-hood study's reduced defaults and their --paper designs."""

from __future__ import annotations

from pathlib import Path

import pytest

from nest_experiments.config import DashApp, Experiment, ObjectsApp, read_toml
from nest_experiments.config.sweep import apply_paper, expand
from nest_experiments.net.kernel import features_needed
from nest_experiments.studies import STUDIES
from tests.unit.claim_cells import problems, sweep_cells

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
MB = 1024**2
SETUP_S = 15  # per run on the host: namespaces, origin, teardown


def _app(e: Experiment) -> ObjectsApp:
    (app,) = e.apps
    assert isinstance(app, ObjectsApp)
    return app


def _host_only(e: Experiment) -> None:
    """No netem anywhere (the host's kernel here has none): a trace-driven HTB bottleneck and a FIFO."""
    for link in e.links:
        for _, _, eg in link.egresses():
            assert not eg.needs_netem


def test_objects_default_and_paper() -> None:
    raw = read_toml(EXPERIMENTS / "under_hood_objects.toml")
    runs = expand(raw)
    assert sorted(_app(r.experiment).transport for r in runs) == ["h3"] * 8 + ["tcp"] * 8  # 8 blocks: 8 pairs
    a = _app(runs[0].experiment)
    assert (a.mode, a.size_min, a.size_max, a.pause_min_s, a.sessions, a.http_server) == \
        ("sequential", 2 * MB, 50 * MB, 0.5, 1, "caddy")  # one run, one session: the unit the claims count
    assert runs[0].experiment.link("bottleneck").forward.trace is not None
    _host_only(runs[0].experiment)
    assert sum(r.experiment.duration_s + SETUP_S for r in runs) <= 36 * 60  # the cost the file states
    paper = expand(apply_paper(raw))
    assert {_app(r.experiment).requests for r in paper} == {40} and len(paper) == 16


def test_parallel_default_and_paper() -> None:
    raw = read_toml(EXPERIMENTS / "under_hood_parallel.toml")
    runs = expand(raw)
    cells = {(_app(r.experiment).pause_min_s, _app(r.experiment).transport) for r in runs}
    assert cells == {(p, t) for p in (0.5, 2.0, 8.0) for t in ("tcp", "h3")} and len(runs) == 36  # 6 blocks
    a = _app(runs[0].experiment)
    assert (a.mode, a.streams, a.size_min, a.size_max, a.sessions) == ("parallel", 2, MB, 8 * MB, 1)
    _host_only(runs[0].experiment)
    assert sum(r.experiment.duration_s + SETUP_S for r in runs) <= 63 * 60  # the cost the file states
    paper = expand(apply_paper(raw))
    assert {_app(r.experiment).pause_min_s for r in paper} == {0.5, 1.0, 2.0, 4.0, 8.0} and len(paper) == 60


def test_dash_default_and_paper() -> None:
    raw = read_toml(EXPERIMENTS / "under_hood_dash.toml")
    runs = expand(raw)
    apps = [r.experiment.apps[0] for r in runs]
    assert all(isinstance(a, DashApp) for a in apps)
    cells = {(a.transport, a.http_server) for a in apps if isinstance(a, DashApp)}
    assert cells == {(t, s) for t in ("tcp", "h3") for s in ("caddy", "nest")} and len(runs) == 32  # 4 blocks
    _host_only(runs[0].experiment)
    assert sum(r.experiment.duration_s + SETUP_S for r in runs) <= 38 * 60  # the cost the file states
    paper = expand(apply_paper(raw))
    assert len(paper) == 5 * 2 * 2 * 10
    traces = {(t["generator"], t["seed"]) for r in paper
              if (t := r.experiment.raw["links"]["bottleneck"]["forward"]["trace"])}
    assert traces == {(g, s) for g in ("fcc", "hsdpa") for s in range(1, 6)}  # the paper's 10 traces, as blocks


def test_every_under_hood_file_runs_on_a_host_without_netem() -> None:
    for name in ("objects", "parallel", "dash"):
        (first, *_) = expand(read_toml(EXPERIMENTS / f"under_hood_{name}.toml"))
        assert set(features_needed(first.experiment)) <= {"veth", "htb", "pfifo"}  # what this host's kernel has


@pytest.mark.parametrize("name", ["objects", "dash", "parallel"])
def test_every_claim_names_cells_the_default_sweep_runs_and_pairs(name: str) -> None:
    study = STUDIES["under_hood"]
    for paper in (False, True):
        cells = sweep_cells(study, f"under_hood_{name}.toml", paper=paper)
        claims = study.claims_for(f"under_hood_{name}")
        assert claims and problems(claims, cells) == []


@pytest.mark.parametrize("name", ["objects", "parallel"])
def test_a_block_downloads_the_same_objects_over_both_transports_and_a_new_draw_each_block(name: str) -> None:
    runs = expand(read_toml(EXPERIMENTS / f"under_hood_{name}.toml"))
    seeds: dict[int, set[int]] = {}
    for r in runs:
        seeds.setdefault(r.repetition, set()).add(_app(r.experiment).seed)
    assert all(len(s) == 1 for s in seeds.values())  # tcp and h3 (and every pause) of a block: one schedule
    assert len({next(iter(s)) for s in seeds.values()}) == len(seeds)  # each block its own


def test_a_dash_block_plays_one_trace_under_every_cell() -> None:
    runs = expand(read_toml(EXPERIMENTS / "under_hood_dash.toml"))
    by_block: dict[int, set[object]] = {}
    for r in runs:
        by_block.setdefault(r.repetition, set()).add(r.experiment.link("bottleneck").forward.trace)
    assert [len(t) for t in by_block.values()] == [1] * 4 and len(set().union(*by_block.values())) == 4
