"""Markdown as every report writes it: tables and numbers. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence


def table(header: Sequence[str], lines: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown table and the blank line after it; a ``|`` in a cell is escaped, a line break becomes a space."""
    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in line) + " |" for line in lines]
    return out + [""]


def number(value: float | None, digits: int = 3) -> str:
    """``digits`` significant digits (whole numbers from 10**digits up); ``-`` for None or NaN."""
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:.0f}"
