"""Committed evidence regenerates: each evidence folder's claim table is what the evaluator gives on its sessions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from nest_experiments.analysis import decisions
from nest_experiments.studies import STUDIES

EVIDENCE = Path(__file__).resolve().parents[2] / "evidence"
FOLDERS = {"nest_paper": "nest"}  # evidence folder -> its study


@pytest.mark.parametrize(("folder", "study"), FOLDERS.items())
def test_the_committed_claim_table_is_what_the_sessions_give(folder: str, study: str) -> None:
    path = EVIDENCE / folder
    sessions = pd.read_csv(path / "sessions.csv")
    verdicts = decisions.judge_sweep(STUDIES[study].claims_for(folder), sessions,
                                     sequential=(path / decisions.SEQUENTIAL_FILE).exists())
    committed = pd.read_csv(path / "claims.csv").set_index("id")
    assert sorted(committed.index) == sorted(v.claim.id for v in verdicts)
    for v in verdicts:
        row = committed.loc[v.claim.id]
        assert row["verdict"] == v.verdict and int(row["n_a"]) == v.n_a and int(row["n_b"]) == v.n_b
        if v.effect is not None:
            assert math.isclose(float(row["effect"]), v.effect, rel_tol=1e-9, abs_tol=1e-12)
    looks = json.loads((path / decisions.SEQUENTIAL_FILE).read_text())["looks"]
    assert [look["block"] for look in looks] == sorted(sessions["block"].unique().tolist())
