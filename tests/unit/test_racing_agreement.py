"""Our chromium policy beside Chromium (studies/racing/agreement.py and the agreement claims): the judge passes
sessions that agree and fails them when they drift apart.

Synthetic sessions in the design of experiments/racing_chromium.toml (4 conditions x 4 blocks, both players in
each block): Chromium 156 as measured behind the shaper and on the clean link (QUIC for every segment after the
first two, docs/racing_chromium_mechanism.md), our policy alike with small differences, and our policy drifted the
way the `request_timeout` rule once made it (TCP after the third segment behind the shaper).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from nest_experiments.analysis.claims import evaluate
from nest_experiments.studies.racing import agreement as ag
from nest_experiments.studies.racing.claims import PAPER_CLAIMS
from nest_experiments.studies.racing.sessions import BROWSER, Session

CONDITIONS = ("2mbit", "2mbit+firewall", "dvl", "dvl+firewall")
N_SEGMENTS = 22  # 11 audio + 11 video segments in 120 s behind the shaper


def session(policy: str, condition: str, block: int, *, tcp_from: int | None = None, stall: float = 40.0,
            bitrate: float = 70.0) -> Session:
    """A session whose segments went over QUIC (from ``tcp_from`` on: over TCP)."""
    timeline = tuple((("audio", "video")[i % 2], i // 2, "tcp" if tcp_from is not None and i >= tcp_from else "quic")
                     for i in range(N_SEGMENTS))
    protocols = [p for _, _, p in timeline]
    metrics = {"rqvst": protocols.count("tcp") / N_SEGMENTS, "quic_segments": protocols.count("quic") / N_SEGMENTS,
               "proto_switches": float(sum(a != b for a, b in zip(protocols, protocols[1:], strict=False))),
               "stall": stall, "bitrate": bitrate}
    return Session(run=f"{policy}_{condition}_r{block}", path=Path("/nonexistent"), policy=policy, condition=condition,
                   pattern="rate", firewall="", metrics=metrics, series={}, probe_rtt={}, decision="",
                   experiment="racing_chromium", block=block, timeline=timeline)


def design(*, drift: bool) -> list[Session]:
    out = []
    for condition in CONDITIONS:
        for block in range(1, 5):
            out.append(session(BROWSER, condition, block, stall=40.0 + block, bitrate=70.0))
            shaped = condition.endswith("+firewall")
            out.append(session("chromium", condition, block, tcp_from=3 if drift and shaped else None,
                               stall=40.5 + block if not (drift and shaped) else 5.0,
                               bitrate=71.0 if not (drift and shaped) else 1100.0))
    return out


def table(sessions: list[Session]) -> pd.DataFrame:
    return pd.DataFrame([{"run": s.run, "block": s.block, "experiment": s.experiment, "policy": s.policy,
                          "condition": s.condition, "saturated": False, **s.metrics} for s in sessions])


AGREEMENT = [c for c in PAPER_CLAIMS if c.id.startswith("chromium_vs_browser_")]


def test_firefox_has_the_same_claims_on_its_own_experiment() -> None:
    ours = {c.id.removeprefix("firefox_") for c in PAPER_CLAIMS if c.id.startswith("firefox_vs_browser_")}
    assert ours == {c.id.removeprefix("chromium_") for c in AGREEMENT} and len(ours) == 5
    assert {c.conditions["experiment"] for c in PAPER_CLAIMS if c.id.startswith("firefox_vs")} == {("racing_firefox",)}


def test_sessions_that_agree_pass_per_condition_and_in_the_pooled_claims() -> None:
    found = ag.pairs(design(drift=False))
    assert len(found) == 16
    assert [(c.condition, c.verdict) for c in ag.by_condition(found)] == [(c, "agrees") for c in CONDITIONS]
    verdicts = {v.claim.id: v.verdict for v in evaluate(AGREEMENT, table(design(drift=False)))}
    # the synthetic sessions keep QUIC's share, RQvsT and the protocol switches at one value in every session of
    # both players: no spread, uninformative (claims.uninformative); stall and bitrate vary and agree
    constant = {f"chromium_vs_browser_{m}_alike" for m in ("quic_segments", "rqvst", "proto_switches")}
    assert len(verdicts) == 5 and {verdicts[c] for c in constant} == {"uninformative"}, verdicts
    assert {v for c, v in verdicts.items() if c not in constant} == {"agrees"}, verdicts


def test_sessions_that_drift_apart_fail() -> None:
    found = ag.pairs(design(drift=True))
    verdicts = {c.condition: c.verdict for c in ag.by_condition(found)}
    assert verdicts["2mbit"] == verdicts["dvl"] == "agrees"
    assert verdicts["2mbit+firewall"] == verdicts["dvl+firewall"] == (
        "drifted: same_protocol, quic_segments, rqvst, stall, bitrate")  # one switch: within its margin
    judged = {v.claim.id: v.verdict for v in evaluate(AGREEMENT, table(design(drift=True)))}
    assert {i for i, v in judged.items() if v == "contradicts"} == {f"chromium_vs_browser_{m}_alike" for m in
                                                                 ("quic_segments", "rqvst", "stall", "bitrate")}
    assert judged["chromium_vs_browser_proto_switches_alike"] != "contradicts"  # one switch apart: within 1


def test_a_session_without_its_partner_is_no_pair_and_the_timeline_is_compared_by_segment() -> None:
    sessions = design(drift=False)
    lone = [s for s in sessions if not (s.policy == BROWSER and s.block == 4)]
    assert len(ag.pairs(lone)) == 12
    a, b = session("chromium", "dvl", 1), session(BROWSER, "dvl", 1, tcp_from=N_SEGMENTS - 2)
    assert ag.same_protocol(a, b) == (N_SEGMENTS - 2) / N_SEGMENTS
    shifted = Session(**{**b.__dict__, "timeline": b.timeline[2:]})  # segments one side never fetched: not compared
    assert ag.same_protocol(a, shifted) == (N_SEGMENTS - 4) / (N_SEGMENTS - 2)


# ---- the real pairs (tests/data/run_folders/racing_chromium_pairs: host runs of 2026-11-26, one block each):
# racing_chromium.toml's shaper condition (E1) and racing_chromium_queue.toml (E4, 400-packet queue); run folders
# cut to manifest, config, segments, racing.csv and qoe.json. The browser's sessions had CPU-saturated windows
# (3 and 9, other sessions' tests on the 2 cores), so the claims leave them out; the table describes them.

PAIRS = Path(__file__).resolve().parents[1] / "data" / "run_folders" / "racing_chromium_pairs"


def test_the_real_pairs_agree_on_racing_and_drift_on_the_first_segments_and_the_stall() -> None:
    from nest_experiments.rundir import RunFolder
    from nest_experiments.studies.racing import STUDY
    from nest_experiments.studies.racing.sessions import load_sessions

    for sweep in ("racing_chromium", "racing_chromium_queue"):
        sessions = load_sessions(PAIRS / sweep)
        [pair] = ag.pairs(sessions)
        ours, browser = pair.ours, pair.browser
        for s in (ours, browser):  # the racing agrees: QUIC kept once it was up, nothing marked broken or failed
            rows = RunFolder(s.path).racing()
            assert not [r for r in rows if r.event in ("broken", "failed", "conn_closed", "stream_error")]
            assert [p for _, _, p in s.timeline][2:] == ["quic"] * (len(s.timeline) - 2)
        assert ours.metrics["proto_switches"] == 1 and browser.metrics["proto_switches"] == 0
        # the first two segments: ours asked for them 0.13 s in, before its QUIC handshake ended (0.41 s), as
        # Chromium would (TCP is open: no main-job delay); the page asked for its first 3.7 s in, after loading
        # the page and dash.js over TCP, with QUIC up: a difference of the page, not of the racing
        assert [p for _, _, p in ours.timeline][:2] == ["tcp", "tcp"] and browser.metrics["rqvst"] == 0
        # the stall: our player fetched video segment 1 at 1.3 Mbit/s (the first segment came at 1.7 Mbit/s over
        # TCP) and it trickled over QUIC behind the shaper to the end; dash.js abandoned its first segment at
        # 5.2 s (AbandonRequestsRule) and played the lowest level: our player has no such rule
        assert ours.metrics["stall"] > 110 and 45 < browser.metrics["stall"] < 55
        [c] = ag.by_condition([pair])
        assert c.verdict == "drifted: same_protocol, quic_segments, rqvst, stall"
        assert {v.verdict for v in STUDY.verdicts(PAIRS / sweep) if "_vs_browser_" in v.claim.id} == {"no data"}
