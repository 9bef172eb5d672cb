"""experiments/abr_quic_tcp.toml: the ABR x transport study's reduced default and its --paper design.

Blocks add traces ([sweep_block]: block r plays seed r of each family); the claims pair TCP and h3 by trace, so
every claim must name cells the sweep runs, on the same traces under both transports.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from nest_experiments.analysis.claims import Claim, Value
from nest_experiments.config import DashApp, Experiment, read_toml
from nest_experiments.config.sweep import RunSpec, apply_paper, expand
from nest_experiments.studies.abr_quic.claims import PAPER_CLAIMS, PAPER_ONLY_ABRS
from nest_experiments.studies.abr_quic.metrics import cell_of

FILE = Path(__file__).resolve().parents[2] / "experiments" / "abr_quic_tcp.toml"
ABRS = ("bba", "bola", "mpc_fast", "mpc_robust", "throughput", "dynamic")
AA = ("abr-bola_transport-tcp_trace-fcc", "abr-bola_transport-h3_trace-fcc")


def dash(experiment: Experiment) -> DashApp:
    app = next(a for a in experiment.apps if a.kind == "dash")
    assert isinstance(app, DashApp)
    return app


def cells(runs: Sequence[RunSpec]) -> list[dict[str, Value]]:
    return [cell_of(r.experiment.raw) for r in runs]


def runs_in(found: Sequence[Mapping[str, Value]], claim: Claim) -> dict[str, set[Value]]:
    """Per arm, the traces of the runs that match the arm under the claim's conditions."""
    def match(cell: Mapping[str, Value], want: Mapping[str, object]) -> bool:
        return all(cell.get(k) in (v if isinstance(v, tuple) else (v,)) for k, v in want.items())

    return {arm: {c["trace"] for c in found if match(c, {**claim.conditions, **getattr(claim, arm)})}
            for arm in ("a", "b")}


def test_reduced_default_is_every_abr_transport_and_family_in_one_block_plus_the_aa_pair() -> None:
    runs = expand(read_toml(FILE))
    assert len(runs) == 6 * 2 * 2 + 2
    names = {r.name for r in runs}
    assert "abr-mpcrobust_transport-h3_trace-hsdpa_r1" in names
    assert {f"{p}_r2" for p in AA} <= names
    cell = Counter((dash(r.experiment).abr, dash(r.experiment).transport) for r in runs)
    assert set(cell) == {(a, t) for a in ABRS for t in ("tcp", "h3")}
    assert cell[("bola", "tcp")] == cell[("bola", "h3")] == 3  # two families + the A/A copy
    assert {c["trace"] for c in cells(runs)} == {"fcc-1", "hsdpa-1"}  # block 1: seed 1 of each family
    # the same origin for both transports, the Table I ladder, an 80 ms base RTT on the trace-driven bottleneck
    assert {(dash(r.experiment).http_server, dash(r.experiment).ladder) for r in runs} == {("caddy", "abr_quic_tcp")}
    link = runs[0].experiment.link("bottleneck")
    assert link.forward.trace is not None and link.forward.delay_s == 0 and link.reverse.delay_s == 0.080
    assert runs[0].experiment.congestion_control == "cubic"
    # the reduced default fits the VM budget: 26 runs x (duration + ~40 s of set-up) <= 45 min
    assert sum(r.experiment.duration_s + 40 for r in runs) + 100 <= 45 * 60


def test_aa_copies_replay_the_first_blocks_trace() -> None:
    runs = {r.name: r.experiment for r in expand(read_toml(FILE))}
    for point in AA:
        a, b = runs[f"{point}_r1"], runs[f"{point}_r2"]
        assert a.apps == b.apps and a.links == b.links


def test_blocks_add_traces_shared_by_every_abr_and_transport() -> None:
    runs = expand(read_toml(FILE), repetitions=3)
    assert len(runs) == 6 * 2 * 2 * 3  # --reps 3: the A/A copy is a regular block now
    by_block = {rep: {c["trace"] for r, c in zip(runs, cells(runs), strict=True) if r.repetition == rep}
                for rep in (1, 2, 3)}
    assert by_block == {k: {f"fcc-{k}", f"hsdpa-{k}"} for k in (1, 2, 3)}
    per_trace = Counter((c["trace"], c["abr"], c["transport"]) for c in cells(runs))
    assert set(per_trace.values()) == {1} and len(per_trace) == 6 * 6 * 2


def test_every_claim_names_cells_the_default_runs_on_shared_traces() -> None:
    """A claim whose arms or conditions the default never runs fails here (Pensieve's: in --paper only)."""
    default = cells(expand(read_toml(FILE)))
    for claim in PAPER_CLAIMS:  # across ABRs (IV-A's buffer-based ones): arm b pools ABRs, Pensieve's only in --paper
        if claim.conditions.get("abr", claim.a.get("abr")) in PAPER_ONLY_ABRS:
            assert not any(runs_in(default, claim).values()), claim.id
            continue
        found = runs_in(default, claim)
        assert found["a"] and found["a"] == found["b"], claim.id  # both transports on the same traces
    paper = cells(expand(apply_paper(read_toml(FILE))))
    for claim in PAPER_CLAIMS:
        found = runs_in(paper, claim)
        assert len(found["a"]) == 50 and found["a"] == found["b"], claim.id


def test_paper_design_is_every_abr_and_transport_over_fifty_traces_of_the_whole_video() -> None:
    runs = expand(apply_paper(read_toml(FILE)))
    assert len(runs) == 7 * 2 * 50 + 2
    assert {dash(r.experiment).abr for r in runs} == {*ABRS, "pensieve"}
    assert "pensieve" not in {dash(r.experiment).abr for r in expand(read_toml(FILE))}  # the default stays reduced
    assert {c["trace"] for c in cells(runs)} == {f"{g}-{s}" for g in ("fcc", "hsdpa") for s in range(1, 26)}
    aa = {r.name: r.experiment for r in runs if r.name.startswith(AA)}
    assert len(aa) == 2 * 26 and all(aa[f"{p}_r26"].links == aa[f"{p}_r1"].links for p in AA)  # the A/A copies
    assert {dash(r.experiment).clip_s for r in runs} == {192.0}
    assert runs[0].experiment.duration_s >= 192 + 60  # room for stalls
    # the letter's two servers (webfsd over TCP, quic-go over QUIC: Caddy's HTTP/3) and Mahimahi's deep queue
    assert {(dash(r.experiment).transport, dash(r.experiment).http_server) for r in runs} == {
        ("tcp", "webfs"), ("h3", "caddy")}
    assert {r.experiment.link("bottleneck").forward.qdisc.param("limit") for r in runs} == {10000}
    reduced = expand(read_toml(FILE))
    assert {r.experiment.link("bottleneck").forward.qdisc.param("limit") for r in reduced} == {60}
