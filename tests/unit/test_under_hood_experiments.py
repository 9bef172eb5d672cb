"""experiments/under_hood_*.toml: the under-the-hood study's reduced defaults and their --paper designs."""

from __future__ import annotations

from pathlib import Path

from nest_experiments.config import DashApp, Experiment, ObjectsApp, read_toml
from nest_experiments.config.sweep import apply_paper, expand
from nest_experiments.net.kernel import features_needed

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
    assert sorted(_app(r.experiment).transport for r in runs) == ["h3", "tcp"]
    a = _app(runs[0].experiment)
    assert (a.mode, a.size_min, a.size_max, a.pause_min_s, a.sessions, a.http_server) == \
        ("sequential", 2 * MB, 50 * MB, 0.5, 3, "caddy")
    assert runs[0].experiment.link("bottleneck").forward.trace is not None
    _host_only(runs[0].experiment)
    assert sum(r.experiment.duration_s + SETUP_S for r in runs) <= 30 * 60
    paper = expand(apply_paper(raw))
    assert {_app(r.experiment).requests for r in paper} == {40} and len(paper) == 2


def test_parallel_default_and_paper() -> None:
    raw = read_toml(EXPERIMENTS / "under_hood_parallel.toml")
    runs = expand(raw)
    cells = {(_app(r.experiment).pause_min_s, _app(r.experiment).transport) for r in runs}
    assert cells == {(p, t) for p in (0.5, 2.0, 8.0) for t in ("tcp", "h3")}
    a = _app(runs[0].experiment)
    assert (a.mode, a.streams, a.size_min, a.size_max) == ("parallel", 2, MB, 8 * MB)
    _host_only(runs[0].experiment)
    assert sum(r.experiment.duration_s + SETUP_S for r in runs) <= 30 * 60
    paper = expand(apply_paper(raw))
    assert {_app(r.experiment).pause_min_s for r in paper} == {0.5, 1.0, 2.0, 4.0, 8.0} and len(paper) == 10


def test_dash_default_and_paper() -> None:
    raw = read_toml(EXPERIMENTS / "under_hood_dash.toml")
    runs = expand(raw)
    apps = [r.experiment.apps[0] for r in runs]
    assert all(isinstance(a, DashApp) for a in apps)
    cells = {(a.transport, a.http_server) for a in apps if isinstance(a, DashApp)}
    assert cells == {(t, s) for t in ("tcp", "h3") for s in ("caddy", "nest")}
    _host_only(runs[0].experiment)
    assert sum(r.experiment.duration_s + SETUP_S for r in runs) <= 30 * 60
    assert len(expand(apply_paper(raw))) == 5 * 2 * 2 * 10


def test_every_under_hood_file_runs_on_a_host_without_netem() -> None:
    for name in ("objects", "parallel", "dash"):
        (first, *_) = expand(read_toml(EXPERIMENTS / f"under_hood_{name}.toml"))
        assert set(features_needed(first.experiment)) <= {"veth", "htb", "pfifo"}  # what this host's kernel has
