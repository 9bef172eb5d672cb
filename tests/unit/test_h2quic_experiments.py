"""experiments/h2quic_{overhead,utilization,adaptation}.toml: reduced defaults and --paper designs."""

from __future__ import annotations

from pathlib import Path

from nest_experiments.config import DashApp, Experiment, read_toml
from nest_experiments.config.sweep import apply_paper, expand
from nest_experiments.dash import media
from nest_experiments.net.kernel import features_needed

DIR = Path(__file__).resolve().parents[2] / "experiments"
BBB = tuple(lv.bitrate_bps for lv in media.load_ladder("bbb_h2quic_video").video.levels)


def dash(experiment: Experiment) -> DashApp:
    app = next(a for a in experiment.apps if a.kind == "dash")
    assert isinstance(app, DashApp)
    return app


def test_overhead_pins_each_representation_on_a_fast_link_and_counts_the_wire() -> None:
    runs = expand(read_toml(DIR / "h2quic_overhead.toml"))
    assert len(runs) == 5 * 3
    cells = {(BBB[dash(r.experiment).level], dash(r.experiment).transport) for r in runs}
    assert cells == {(b, t) for b in (100_000, 500_000, 1_300_000, 2_800_000, 4_500_000) for t in ("tcp", "h2", "h3")}
    for r in runs:
        exp, app = r.experiment, dash(r.experiment)
        assert (app.abr, app.ladder, app.http_server) == ("fixed", "bbb_h2quic_video", "caddy")
        assert exp.wire_links == ("bottleneck",) and exp.link("bottleneck").forward.rate_bps == 20_000_000
        assert not features_needed(exp).get("netem")  # the host runtime can run it
        assert app.clip_s is not None and exp.duration_s >= app.clip_s + 10
    assert sum(r.experiment.duration_s + 40 for r in runs) <= 30 * 60  # the VM budget (~40 s set-up per run)
    paper = expand(apply_paper(read_toml(DIR / "h2quic_overhead.toml")))
    assert len(paper) == 14 * 3 * 5
    assert {BBB[dash(r.experiment).level] for r in paper} == set(BBB)


def test_utilization_sets_the_bandwidth_to_the_pinned_representation_at_three_rtts() -> None:
    runs = expand(read_toml(DIR / "h2quic_utilization.toml"))
    assert len(runs) == 3 * 3 * 3
    for r in runs:
        link = r.experiment.link("bottleneck")
        assert link.forward.rate_bps == BBB[dash(r.experiment).level]
    assert {r.experiment.link("bottleneck").reverse.delay_s for r in runs} == {0.0, 0.05, 0.150}
    host = [r for r in runs if r.experiment.link("bottleneck").reverse.delay_s == 0]
    assert len(host) == 9 and not any(features_needed(r.experiment).get("netem") for r in host)
    vm = [r for r in runs if r not in host]
    assert sum(r.experiment.duration_s + 40 for r in vm) + 100 <= 30 * 60
    paper = expand(apply_paper(read_toml(DIR / "h2quic_utilization.toml")))
    assert len(paper) == 14 * 3 * 3 * 5
    assert all(r.experiment.link("bottleneck").forward.rate_bps == BBB[dash(r.experiment).level] for r in paper)


def test_adaptation_replays_the_h2eval_trajectory_per_protocol_and_rtt() -> None:
    runs = expand(read_toml(DIR / "h2quic_adaptation.toml"))
    assert len(runs) == 3 * 3
    for r in runs:
        link, app = r.experiment.link("bottleneck"), dash(r.experiment)
        assert link.forward.trace is not None and link.forward.trace.source.startswith("h2eval")
        assert (app.abr, app.ladder) == ("throughput", "bbb_h2quic_video")
    vm = [r for r in runs if r.experiment.link("bottleneck").reverse.delay_s > 0]
    assert sum(r.experiment.duration_s + 40 for r in vm) + 100 <= 30 * 60
    paper = expand(apply_paper(read_toml(DIR / "h2quic_adaptation.toml")))
    assert len(paper) == 3 * 3 * 5 and {dash(r.experiment).clip_s for r in paper} == {300.0}
