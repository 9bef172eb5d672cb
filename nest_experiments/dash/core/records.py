"""Rows the DASH code produces: ``segments.csv`` (DESIGN.md §4) and ABR decisions.

Their schemas, readers and atomic writers are the run folder's (:mod:`nest_experiments.rundir.rows`, re-exported
here for the player's modules); what is the player's own: the decision kinds of an abandoned or timed-out request.
"""

from __future__ import annotations

from collections.abc import Sequence

from nest_experiments.rundir.rows import ACCESS_LOG_FIELDS as ACCESS_LOG_FIELDS
from nest_experiments.rundir.rows import DECISION_FIELDS as DECISION_FIELDS
from nest_experiments.rundir.rows import SEGMENT_FIELDS as SEGMENT_FIELDS
from nest_experiments.rundir.rows import DecisionRow as DecisionRow
from nest_experiments.rundir.rows import SegmentRow as SegmentRow
from nest_experiments.rundir.rows import read_segments as read_segments
from nest_experiments.rundir.rows import write_decisions as write_decisions
from nest_experiments.rundir.rows import write_segments as write_segments

ABANDON = "abandon"  # DecisionRow.algorithm of a switch that abandoned a request (dash.js's AbandonRequestsRule)
TIMEOUT = "timeout"  # DecisionRow.algorithm of a request cancelled by dash.js's XHR timeout (same level again)


def abandoned(decisions: Sequence[DecisionRow]) -> int:
    """How many requests a session abandoned."""
    return sum(d.algorithm == ABANDON for d in decisions)
