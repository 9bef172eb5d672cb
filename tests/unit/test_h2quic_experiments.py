"""experiments/h2quic_{overhead,utilization,adaptation}.toml: reduced defaults and --paper designs."""

from __future__ import annotations

from pathlib import Path

import pytest

from nest_experiments.config import DashApp, Experiment, read_toml
from nest_experiments.config.sweep import apply_paper, expand
from nest_experiments.dash.content import media
from nest_experiments.net.kernel import features_needed
from nest_experiments.studies import STUDIES
from tests.unit.claim_cells import problems, sweep_cells

DIR = Path(__file__).resolve().parents[2] / "experiments"
BBB = tuple(lv.bitrate_bps for lv in media.load_ladder("bbb_h2quic_video").video.levels)


def dash(experiment: Experiment) -> DashApp:
    app = next(a for a in experiment.apps if a.kind == "dash")
    assert isinstance(app, DashApp)
    return app


def test_overhead_pins_each_representation_on_a_fast_link_and_counts_the_wire() -> None:
    runs = expand(read_toml(DIR / "h2quic_overhead.toml"))
    assert len(runs) == 5 * 3 * 2  # 2 blocks: 10 pairs per protocol pair
    cells = {(BBB[dash(r.experiment).level], dash(r.experiment).transport) for r in runs}
    assert cells == {(b, t) for b in (100_000, 500_000, 1_300_000, 2_800_000, 4_500_000) for t in ("tcp", "h2", "h3")}
    for r in runs:
        exp, app = r.experiment, dash(r.experiment)
        assert (app.abr, app.ladder, app.http_server) == ("fixed", "bbb_h2quic_video", "caddy")
        assert exp.wire_links == ("bottleneck",) and exp.link("bottleneck").forward.rate_bps == 20_000_000
        assert not features_needed(exp).get("netem")  # the host runtime can run it
        assert app.clip_s is not None and exp.duration_s >= app.clip_s + 10
    assert sum(r.experiment.duration_s + 10 for r in runs) <= 30 * 60  # the host (~10 s set-up per run)
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
    # RTT 0 crosses the router guest too: the RTT claims pair sessions of one runtime and one path
    assert {r.experiment.runtime for r in runs} == {"auto"}
    assert all(r.experiment.link("bottleneck").through_router for r in runs)
    rtt0 = [r for r in runs if r.experiment.link("bottleneck").reverse.delay_s == 0]
    assert len(rtt0) == 9 and not any(features_needed(r.experiment).get("netem") for r in rtt0)  # --runtime host
    # the cost the file states: 930 s measured in the router runtime (33-34 s per 32 s run, the boot, the plots)
    assert sum(r.experiment.duration_s + 1 for r in runs) + 60 <= 16 * 60
    paper = expand(apply_paper(read_toml(DIR / "h2quic_utilization.toml")))
    assert len(paper) == 14 * 3 * 3 * 5
    assert all(r.experiment.link("bottleneck").forward.rate_bps == BBB[dash(r.experiment).level] for r in paper)


def test_adaptation_replays_the_h2eval_trajectory_per_protocol_and_rtt() -> None:
    runs = expand(read_toml(DIR / "h2quic_adaptation.toml"))
    assert len(runs) == 3 * 3 * 3  # 3 blocks: 9 pairs per claim (6 cannot decide a two-sided signed-rank test)
    for r in runs:
        link, app = r.experiment.link("bottleneck"), dash(r.experiment)
        assert link.forward.trace is not None and link.forward.trace.source.startswith("h2eval")
        assert (app.abr, app.ladder) == ("throughput", "bbb_h2quic_video")
    assert {r.experiment.runtime for r in runs} == {"auto"}
    assert all(r.experiment.link("bottleneck").through_router for r in runs)
    # the cost the file states: 135-137 s per 130 s run here, a VM boot and a 30 s warm-up (~40 s) per block
    assert sum(r.experiment.duration_s + 6 for r in runs) + 3 * 60 <= 65 * 60
    paper = expand(apply_paper(read_toml(DIR / "h2quic_adaptation.toml")))
    assert len(paper) == 3 * 3 * 5 and {dash(r.experiment).clip_s for r in paper} == {300.0}


@pytest.mark.parametrize("name", ["overhead", "utilization", "adaptation"])
def test_every_claim_names_cells_the_default_sweep_runs_and_pairs(name: str) -> None:
    study = STUDIES["h2quic"]
    claims = study.claims_for(f"h2quic_{name}")
    for paper in (False, True):
        assert claims and problems(claims, sweep_cells(study, f"h2quic_{name}.toml", paper=paper)) == []


def test_a_claim_across_the_rtt_pairs_sessions_of_one_runtime() -> None:
    across = [c for c in STUDIES["h2quic"].paper_claims if "rtt_ms" in c.a]
    assert len(across) == 4
    for c in across:
        assert "runtime" in c.pair_by and "runtime" not in c.conditions, c.id
