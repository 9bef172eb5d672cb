"""The test tree's modules have distinct names: tests/unit and tests/integration are not packages, so pytest
imports each test module by its base name, and a second module of the same name stops the collection."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "data" not in p.relative_to(TESTS).parts)
    assert len(names) > 50  # the tree was found
    assert [n for n, k in names.items() if k > 1] == []
