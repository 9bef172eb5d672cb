"""experiments/abr_quic_tcp.toml: the ABR x transport study's reduced default and its --paper design."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from nest_experiments.config import DashApp, Experiment, read_toml
from nest_experiments.config.sweep import apply_paper, expand

FILE = Path(__file__).resolve().parents[2] / "experiments" / "abr_quic_tcp.toml"
ABRS = ("bba", "bola", "mpc_fast", "mpc_robust", "throughput", "dynamic")
AA = ("abr-bola_transport-tcp_trace-fcc-1", "abr-bola_transport-h3_trace-fcc-1")


def dash(experiment: Experiment) -> DashApp:
    app = next(a for a in experiment.apps if a.kind == "dash")
    assert isinstance(app, DashApp)
    return app


def test_reduced_default_is_every_abr_and_transport_on_two_traces_plus_two_aa_pairs() -> None:
    runs = expand(read_toml(FILE))
    assert len(runs) == 6 * 2 * 2 + 2
    names = {r.name for r in runs}
    assert "abr-mpcrobust_transport-h3_trace-hsdpa-1_r1" in names
    assert {f"{p}_r2" for p in AA} <= names
    cells = Counter((dash(r.experiment).abr, dash(r.experiment).transport) for r in runs)
    assert set(cells) == {(a, t) for a in ABRS for t in ("tcp", "h3")}
    assert cells[("bola", "tcp")] == cells[("bola", "h3")] == 3  # two traces + the A/A twin
    assert {a.abr for a in map(dash, (r.experiment for r in runs))} == set(ABRS)
    # the same origin for both transports, the Table I ladder, an 80 ms base RTT on the trace-driven bottleneck
    assert {(dash(r.experiment).http_server, dash(r.experiment).ladder) for r in runs} == {("caddy", "abr_quic_tcp")}
    link = runs[0].experiment.link("bottleneck")
    assert link.forward.trace is not None and link.forward.delay_s == 0 and link.reverse.delay_s == 0.080
    assert runs[0].experiment.congestion_control == "cubic"
    # the reduced default fits the VM budget: 26 runs x (duration + ~40 s of set-up) <= 45 min
    assert sum(r.experiment.duration_s + 40 for r in runs) + 100 <= 45 * 60


def test_aa_twins_are_the_same_configuration() -> None:
    runs = {r.name: r.experiment for r in expand(read_toml(FILE))}
    for point in AA:
        a, b = runs[f"{point}_r1"], runs[f"{point}_r2"]
        assert a.apps == b.apps and a.links == b.links


def test_paper_design_is_every_abr_and_transport_over_fifty_traces_of_the_whole_video() -> None:
    runs = expand(apply_paper(read_toml(FILE)))
    assert len(runs) == 7 * 2 * 50 + 2
    assert {dash(r.experiment).abr for r in runs} == {"bba", "bola", "mpc_fast", "mpc_robust", "throughput", "dynamic",
                                                      "pensieve"}
    assert "pensieve" not in {dash(r.experiment).abr for r in expand(read_toml(FILE))}  # the default stays reduced
    traces = {r.name.split("_trace-")[1].rsplit("_r", 1)[0] for r in runs}
    assert traces == {f"{g}-{s}" for g in ("fcc", "hsdpa") for s in range(1, 26)}
    assert {dash(r.experiment).clip_s for r in runs} == {192.0}
    assert runs[0].experiment.duration_s >= 192 + 60  # room for stalls
