"""experiments/racing_*.toml: reduced defaults and --paper designs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from nest_experiments.config import DashApp, Experiment, read_toml
from nest_experiments.config.sweep import apply_paper, expand
from nest_experiments.dash.core.racing import params_from
from nest_experiments.studies import STUDIES
from tests.unit.claim_cells import problems, sweep_cells

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
PATTERNS = EXPERIMENTS / "racing_patterns.toml"
FIREWALL = EXPERIMENTS / "racing_firewall.toml"
HOST_OVERHEAD_S = 15  # set-up and teardown of one run on the host (the race integration tests: ~6-8 s)


def dash(experiment: Experiment) -> DashApp:
    app = next(a for a in experiment.apps if a.kind == "dash")
    assert isinstance(app, DashApp) and app.transport == "race" and app.player == "nest"
    return app


def generator(e: Experiment) -> str:
    trace = e.link("bottleneck").forward.trace
    return "rate" if trace is None else trace.source.split("(")[0]


def test_patterns_default_every_policy_on_table_ii_and_a_mobility_trace_within_budget() -> None:
    runs = expand(read_toml(PATTERNS))
    cells = Counter((generator(r.experiment), dash(r.experiment).racing) for r in runs)
    assert set(cells) == {(g, p) for g in ("dh", "dl", "dvl", "hsdpa")
                          for p in ("chromium", "quic_only", "tcp_only", "dynamic")}
    assert set(cells.values()) == {6}  # 6 blocks: 6 pairs per claim
    e = runs[0].experiment
    assert e.runtime == "host" and e.firewalls == () and e.congestion_control == "cubic"
    assert all(link.forward.delay_s == link.reverse.delay_s == 0 for link in e.links)  # no netem on the host
    params = params_from(dict(dash(e).racing_params))
    assert (params.probe_interval_s, params.min_probes, params.broken_initial_s) == (5.0, 3, 300.0)
    assert sum(r.experiment.duration_s + HOST_OVERHEAD_S for r in runs) <= 3.6 * 3600  # the cost the file states
    # one whole period of each scaled pattern fits in the run
    for r in runs:
        trace = r.experiment.link("bottleneck").forward.trace
        assert trace is not None and (generator(r.experiment) == "hsdpa" or trace.period_s <= r.experiment.duration_s)


def test_patterns_paper_is_real_speed_paper_probes_and_firefox() -> None:
    runs = expand(apply_paper(read_toml(PATTERNS)))
    assert len(runs) == 4 * 5 * 6
    assert {dash(r.experiment).racing for r in runs} == {"chromium", "firefox", "quic_only", "tcp_only", "dynamic"}
    params = params_from(dict(dash(runs[0].experiment).racing_params))
    assert (params.probe_interval_s, params.min_probes, params.probe_window, params.rtt_ratio) == (15.0, 10, 10, 3.0)
    dvl = next(r.experiment for r in runs if generator(r.experiment) == "dvl")
    assert dvl.link("bottleneck").forward.trace is not None
    assert dvl.link("bottleneck").forward.trace.period_s == 8 * 60  # Table II: 64..256 by 64, 60 s each, and back


def test_firewall_default_poor_network_vs_64kbit_udp_shaper() -> None:
    runs = expand(read_toml(FIREWALL))
    assert len(runs) == 2 * 2 * 3 * 6 and sum(r.experiment.duration_s + HOST_OVERHEAD_S for r in runs) <= 2.7 * 3600
    seen = set()
    for r in runs:
        (fw,) = r.experiment.firewalls
        assert (fw.proto, fw.port, fw.rate_bps, fw.router, fw.queue_pkts) == ("udp", 8443, 64_000, "r1", 10)
        seen.add((generator(r.experiment), fw.action, dash(r.experiment).racing))
        assert r.experiment.runtime == "host"
    assert seen == {(g, a, p) for g in ("dvl", "rate") for a in ("accept", "shape")
                    for p in ("chromium", "quic_only", "dynamic")}
    paper = expand(apply_paper(read_toml(FIREWALL)))
    assert {r.experiment.firewalls[0].action for r in paper} == {"accept", "shape", "drop"} and len(paper) == 108


def test_every_racing_file_gets_the_racing_study() -> None:
    names = {read_toml(f)["experiment"]["name"] for f in EXPERIMENTS.glob("racing*.toml")}
    assert len(names) == 6 and names <= set(STUDIES["racing"].experiments)


def test_chromium_reference_plays_the_firewall_files_conditions_with_both_players_in_each_block() -> None:
    chromium = expand(read_toml(EXPERIMENTS / "racing_chromium.toml"))
    ours = expand(read_toml(FIREWALL))

    def condition(e: Experiment) -> tuple[str, str]:
        return generator(e), e.firewalls[0].action

    assert {condition(r.experiment) for r in chromium} == {condition(r.experiment) for r in ours}
    cells = Counter((condition(r.experiment), next(a for a in r.experiment.apps if a.kind == "dash").player,
                     r.repetition) for r in chromium)
    assert len(cells) == len(chromium) == 4 * 2 * 4 and set(cells.values()) == {1}  # n = 4 pairs per condition
    # the cost the file states (~1.6 h): 120 s + ~60 s per run here (Chromium, the CPU guard, set-up)
    assert sum(r.experiment.duration_s + 60 for r in chromium) <= 1.6 * 3600
    for r in chromium:
        app = next(a for a in r.experiment.apps if a.kind == "dash")
        assert isinstance(app, DashApp) and (app.transport, app.http_server, app.media) == ("race", "caddy", "encoded")
        # dash.js 5.2.1's default rules on both sides (ours: abr.DashJs), with its fast switch
        assert app.player in ("nest", "dashjs") and (app.abr, app.fast_switch) == ("dashjs", "dashjs")
        if app.player == "nest":  # our chromium policy at its defaults: no player-side timeout
            assert app.racing == "chromium" and dict(app.racing_params) == {}
        assert r.experiment.firewalls[0].port == 8443 and r.experiment.runtime == "host"
        mine = next(o.experiment for o in ours if condition(o.experiment) == condition(r.experiment))
        assert r.experiment.link("bottleneck") == mine.link("bottleneck")
    assert {condition(r.experiment)[1] for r in expand(apply_paper(read_toml(EXPERIMENTS / "racing_chromium.toml")))} \
        == {"accept", "shape", "drop"}


def test_the_queue_variant_is_the_shaper_condition_with_400_packets() -> None:
    runs = expand(read_toml(EXPERIMENTS / "racing_chromium_queue.toml"))
    assert sorted(next(a for a in r.experiment.apps if a.kind == "dash").player for r in runs) == ["dashjs", "nest"]
    (fw,) = runs[0].experiment.firewalls
    assert (fw.action, fw.rate_bps, fw.queue_pkts, fw.port) == ("shape", 64_000, 400, 8443)


def test_no_racing_experiment_sets_a_player_timeout() -> None:
    # request_timeout / stream_timeout are player knobs, no browser's (issue 29): the studies leave them off
    for path in (PATTERNS, FIREWALL):
        for r in expand(apply_paper(read_toml(path))) + expand(read_toml(path)):
            params = params_from(dict(dash(r.experiment).racing_params))
            assert (params.request_timeout_s, params.stream_timeout_s) == (0.0, 0.0), path


@pytest.mark.parametrize("name", ["racing_patterns", "racing_firewall", "racing_chromium", "racing_chromium_queue",
                                  "racing_firefox"])
def test_every_claim_names_cells_the_default_sweep_runs_and_pairs(name: str) -> None:
    study = STUDIES["racing"]
    claims = study.claims_for(name)
    for paper in (False, True):
        assert claims and problems(claims, sweep_cells(study, f"{name}.toml", paper=paper)) == []


def test_firefox_reference_pairs_our_firefox_policy_with_firefox_esr_in_each_block() -> None:
    cells = sweep_cells(STUDIES["racing"], "racing_firefox.toml")
    assert Counter(cells["policy"]) == {"firefox_browser": 16, "firefox": 16}
    assert Counter(zip(cells["condition"], cells["block"], strict=True)) == {
        (c, b): 2 for c in ("dvl", "2mbit", "dvl+firewall", "2mbit+firewall") for b in range(1, 5)}


def test_cell_of_names_the_browsers_runs_chromium_browser() -> None:
    cells = sweep_cells(STUDIES["racing"], "racing_chromium.toml")
    assert Counter(cells["policy"]) == {"chromium_browser": 16, "chromium": 16}
    assert set(cells["condition"]) == {"dvl", "2mbit", "dvl+firewall", "2mbit+firewall"}
