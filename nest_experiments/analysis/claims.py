"""A paper's claims as data, judged on a table of sessions (pure: pandas, numpy and scipy only).

A :class:`Claim` names the paper's statement, a metric with one value per
*session* (the unit of replication), two arms (axis -> value), the conditions
it holds under, how the design pairs sessions (``pair_by``) and blocks them
(``strata``), the expectation (``a > b``, ``a < b`` or ``|a - b| < margin``)
and the scale of the effect (a difference, or a ratio judged on the log
scale). A one-sample claim has no arm b but a ``reference`` constant ("PIE
holds its delay at its 5 ms target": arm a's sessions against 5 ms): each
session's difference from it (or log ratio to it) is judged as a paired
difference would be. :func:`evaluate` turns a per-session DataFrame into one
:class:`Verdict` per claim:

- saturated sessions (the ``saturated`` column) are left out and counted;
- paired (``pair_by`` given): sessions of the two arms with the same
  ``strata + pair_by`` values form a pair (never across strata; several
  sessions of one arm under one key are averaged first); the effect is the
  Hodges-Lehmann estimate of the paired differences (the median of their
  Walsh averages) and the test the Wilcoxon signed-rank test, on the
  differences of all strata pooled (valid: the sign of each difference is
  symmetric under no effect, whatever its stratum);
- unpaired: the Hodges-Lehmann shift (the median of all a - b differences) and
  the Mann-Whitney U test; with ``strata``, only differences within a stratum
  count, with van Elteren's weights (normal null);
- the CI is the distribution-free one that inverts the same test (exact
  order statistics of the Walsh averages / differences), so test, CI and
  verdict agree; ratio claims are judged on log(metric) and shown as exp;
- the verdict follows the decision rule of :mod:`.sequential` at the look's
  alpha (alpha spending over repeated looks), and for a claim still open says
  how many more sessions would decide it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from nest_experiments.analysis import sequential as seq
from nest_experiments.analysis.ranktests import ShiftTest, rank_sum, share_test, signed_rank, stratified_rank_sum
from nest_experiments.errors import ConfigError

Value = str | int | float | bool
SCALES = ("diff", "ratio")
PAPER, FIDELITY = "paper", "fidelity"
TWO_ARM_SHARES = ("a lower", "a higher", "alike")  # a pair's difference a - b below, above or within the tie band
ONE_ARM_SHARES = ("above", "below")  # a session of arm a above / below the threshold
SHARES = TWO_ARM_SHARES + ONE_ARM_SHARES
KINDS = (PAPER, FIDELITY)
SATURATED = "saturated"
BLOCK = "block"  # a sequential run's block (replay's default): the sessions still needed arrive per block
MAX_LOOKS_AHEAD = 2**20  # _more_needed: how far ahead it looks for the look that decides
LOOKS_SIMULATED = 64  # _more_needed: the looks ahead checked one by one for "too few" (spending nothing)
PRACTICAL_MORE = 1000  # more_text: past this many sessions still needed the count says only that the effect is near
# its boundary (the count grows as (SD / distance)^2: +546635 pairs is a number no study runs, not a plan)


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One finding of a paper, as data (see the module docstring). ``margin``: for ``|a - b| < margin``, the
    equivalence margin (required); for ``a > b`` / ``a < b``, optional, the smallest effect the statement means
    (a CI below it in the claimed direction contradicts the claim: :mod:`.sequential`). Absolute in the metric's
    unit, or with ``margin_relative`` a fraction of arm b's median (diff scale) or of the ratio (ratio scale: a / b
    within [1 / (1 + margin), 1 + margin]). ``reference``: a one-sample claim, arm
    a against this constant (in the metric's unit; ``b`` is then empty, and a relative margin is of it)."""

    id: str
    statement: str  # the paper's words
    figure: str  # where the paper shows it: "Fig. 4", "Table 2"
    metric: str  # a column of the per-session table
    a: Mapping[str, Value | tuple[Value, ...]]  # an arm: axis -> value, or values whose sessions it pools (a
    b: Mapping[str, Value | tuple[Value, ...]]  # pair's arm with several averages them, as repeated sessions)
    expect: str  # one of sequential.EXPECTATIONS
    paper_value: str = ""  # the paper's number, where it gives one
    conditions: Mapping[str, Value | tuple[Value, ...]] = field(default_factory=dict)
    pair_by: tuple[str, ...] = ()  # empty: unpaired. Sequential runs: include "block" (or the seed), else the
    # sessions a new block adds to a key already paired are averaged into that pair and n_pairs stops growing
    strata: tuple[str, ...] = ()
    margin: float | None = None
    margin_relative: bool = False
    scale: str = "diff"
    reference: float | None = None  # a one-sample claim: arm a against this constant (b = {})
    # where the margin comes from: "paper: <the paper's words that give it>" or "rule: <the stated rule>" ("":
    # no margin, or unstated); post_hoc: why the declaration or its margin came after data of its design (a margin
    # chosen after five blocks; a claim declared after the evidence was committed), "" when stated before any
    margin_source: str = ""
    post_hoc: str = ""
    # translations that keep the paper's condition (the module docstring):
    per: str = ""  # judge metric / this column (RTT per unit of bitrate: the paper's RTT at its bitrate)
    exclude: tuple[Mapping[str, Value], ...] = ()  # cells left out (a session matching every axis of one)
    versus: Mapping[str, Value] = field(default_factory=dict)  # an interaction ("more prominent at X than at Y"):
    # the paired effect a - b under ``conditions`` (X) against the same effect where these condition axes take these
    # values instead (Y), judged per pair_by key on the difference of the two effects (:func:`_interaction`)
    worst_over: tuple[str, ...] = ()  # "in all cases": a one-sample claim judged per pair_by key (a block) on its
    # worst case over these axes (the least favourable to the claim), each case's sessions averaged
    share: str = ""  # a proportion claim (SHARES): the share of pairs (or of arm a's sessions) in this category
    paper_share: float | None = None  # the share the paper reports (0..1), what the proportion claim tests against
    share_of: str = "all"  # "all" pairs, or "unlike": the pairs not alike (the paper's "rejected null" cases)
    tie: float | None = None  # the band within which a pair counts as alike (absolute; tie_relative: of b's value)
    tie_relative: bool = False
    threshold: float | None = None  # a one-arm share: sessions above / below this value
    cap: tuple[float, float] | None = None  # the metric's bound by construction (the player's buffer between its
    # maximum and one segment above it): a claim whose sessions all lie in it is uninformative (uninformative())
    kind: str = PAPER  # PAPER: one of the paper's findings; FIDELITY: our model against a reference (a browser):
    # judged in a family of its own and shown apart, never counted among the paper's verdicts
    # the family whose false decisions are bounded together (Holm, :func:`step_down`), and how many claims it has
    # in all (over every experiment of its study): set by Study.claims_for; "" is a family of this claim alone
    family: str = field(default="", compare=False)
    family_size: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        for name in ("a", "b", "conditions", "versus"):
            value = {k: tuple(v) if isinstance(v, list) else v for k, v in getattr(self, name).items()}
            object.__setattr__(self, name, MappingProxyType(value))
        for name in ("pair_by", "strata"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.cap is not None:
            object.__setattr__(self, "cap", (float(self.cap[0]), float(self.cap[1])))
        object.__setattr__(self, "worst_over", tuple(self.worst_over))
        object.__setattr__(self, "exclude", tuple(MappingProxyType(dict(x)) for x in self.exclude))
        _check_claim(self)

    @property
    def paired(self) -> bool:
        """Judged on differences (paired sessions, or one sample against the reference)."""
        return bool(self.pair_by) or self.one_sample

    @property
    def one_sample(self) -> bool:
        """One arm: against a constant (``reference``), or a share of arm a's sessions (``share`` above / below)."""
        return self.reference is not None or self.share in ONE_ARM_SHARES

    def where(self, key: str) -> str:
        return f"claims.{self.id}.{key}" if self.id else f"claims.{key}"


def _check_claim(c: Claim) -> None:
    def bad(key: str, message: str) -> ConfigError:
        return ConfigError(c.where(key), message)

    if not c.id or not c.metric:
        raise bad("id" if not c.id else "metric", "must be a non-empty string")
    if c.expect not in seq.EXPECTATIONS:
        raise bad("expect", f"{c.expect!r} is not one of {', '.join(repr(e) for e in seq.EXPECTATIONS)}")
    if c.scale not in SCALES:
        raise bad("scale", f"{c.scale!r} is not 'diff' or 'ratio'")
    if c.kind not in KINDS:
        raise bad("kind", f"{c.kind!r} is not one of {', '.join(repr(k) for k in KINDS)}")
    if c.share or c.paper_share is not None:
        _check_share(c, bad)
    if c.worst_over:
        if c.reference is None or not c.pair_by:
            raise bad("worst_over", "the worst case over cells is a one-sample claim (reference) judged per pair_by "
                      "key (e.g. pair_by = [\"block\"])")
        clash = set(c.worst_over) & (set(c.a) | set(c.pair_by))
        if clash:
            raise bad("worst_over", f"{sorted(clash)} is an arm or pairing axis")
    if c.versus:
        _check_versus(c, bad)
    if c.one_sample:
        _check_one_sample(c, bad)
    elif not c.a or set(c.a) != set(c.b):
        raise bad("b", f"the arms must name the same axes (a: {sorted(c.a)}, b: {sorted(c.b)})")
    elif dict(c.a) == dict(c.b):
        raise bad("b", "the two arms are the same cell: give b another value on at least one axis")
    for key in ("conditions", "pair_by", "strata"):
        clash = set(getattr(c, key)) & set(c.a)
        if clash:
            raise bad(key, f"{sorted(clash)} is an arm axis: it cannot also be a condition, pair or stratum key")
    _check_margin(c, bad)


def _check_share(c: Claim, bad: Callable[[str, str], ConfigError]) -> None:
    if c.share not in SHARES:
        raise bad("share", f"{c.share!r} is not one of {', '.join(repr(x) for x in SHARES)}")
    if c.paper_share is None or not 0 <= c.paper_share <= 1:
        raise bad("paper_share", "a proportion claim needs the paper's share, 0..1")
    if c.reference is not None or c.scale != "diff":
        raise bad("reference", "a proportion claim has no reference constant and judges on the diff scale")
    if c.share_of not in ("all", "unlike"):
        raise bad("share_of", f"{c.share_of!r} is not 'all' or 'unlike'")
    if c.share in ONE_ARM_SHARES and c.threshold is None:
        raise bad("threshold", f"share = {c.share!r}: the value arm a's sessions are counted {c.share}")
    if c.share in TWO_ARM_SHARES and not c.pair_by:
        raise bad("pair_by", "a share of pairs needs the pairing key")
    if c.margin_relative:
        raise bad("margin", "a proportion claim's margin is absolute, in share points (0.15)")


def _check_versus(c: Claim, bad: Callable[[str, str], ConfigError]) -> None:
    if c.one_sample or c.share or c.worst_over or not c.pair_by:
        raise bad("versus", "an interaction compares a paired effect a - b at two conditions: it needs two arms "
                  "and pair_by, and no reference, share or worst_over")
    for axis, value in c.versus.items():
        if axis not in c.conditions:
            raise bad("versus", f"{axis!r}: an interaction's axis is a condition (its value at X): add it to "
                      "conditions")
        if c.conditions[axis] == value:
            raise bad("versus", f"{axis!r}: the same value as its condition ({value!r}): give the other case's")
        if axis in c.pair_by or axis in c.strata:
            raise bad("versus", f"{axis!r} is a pair or stratum key: the two cases are paired by the other keys")
    if c.margin_relative and c.scale == "diff":
        raise bad("margin", "an interaction's margin is absolute on the diff scale (or relative: scale = \"ratio\")")


def _check_one_sample(c: Claim, bad: Callable[[str, str], ConfigError]) -> None:
    if c.b:
        raise bad("b", "a claim with a reference is one arm against that constant: leave b empty (b = {})")
    if c.pair_by and not c.worst_over and not c.share:
        raise bad("pair_by", "a one-sample claim (reference) has no partner sessions: remove pair_by")
    if c.reference is None:
        return
    if not math.isfinite(c.reference) or (c.scale == "ratio" and c.reference <= 0):
        raise bad("reference", f"{c.reference!r}: a finite number in the metric's unit (> 0 for scale = \"ratio\")")


def _check_margin(c: Claim, bad: Callable[[str, str], ConfigError]) -> None:
    if c.expect != seq.EQUIVALENT and c.margin is None:
        return  # a directional claim without its smallest meant effect: decided by the sign only
    if c.margin is None or not c.margin > 0:
        raise bad("margin", "needs margin > 0: a number in the metric's unit, or \"5%\" of b" +
                  (" ('|a - b| < margin' needs one)" if c.expect == seq.EQUIVALENT else ""))
    if c.scale == "ratio" and not c.margin_relative:
        raise bad("margin", "a ratio claim needs a relative margin, e.g. margin = \"5%\"")


CLAIM_KEYS = {f.name for f in fields(Claim)} - {"margin_relative", "family", "family_size", "exclude", "worst_over",
                                                 "share", "paper_share", "share_of", "tie", "tie_relative",
                                                 "threshold", "per", "versus"}  # the study's forms, declared
# in Python


def claim_from_table(table: Mapping[str, Any], path: str = "claims") -> Claim:
    """A claim from a plain dict / TOML table; errors are one line naming the key and the fix. ``margin`` is a
    number (the metric's unit) or a string "N%" (relative)."""
    if not isinstance(table, Mapping):
        raise ConfigError(path, f"expected a table (id = ..., metric = ..., a = {{...}}, ...), got {table!r}")
    cid = table.get("id", "")
    where = f"{path}.{cid}" if isinstance(cid, str) and cid else path
    unknown = sorted(set(table) - CLAIM_KEYS)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", f"unknown key; the keys are {', '.join(sorted(CLAIM_KEYS))}")
    needed = ("id", "statement", "figure", "metric", "a", "expect") + (() if "reference" in table else ("b",))
    missing = sorted(k for k in needed if k not in table)
    if missing:
        raise ConfigError(f"{where}.{missing[0]}", "missing: every claim names id, statement, figure, metric, a, b "
                          "(or a reference constant instead of b) and expect")
    kwargs = {k: _field(where, k, v) for k, v in table.items() if k not in ("margin", "reference", "cap")}
    cap = table.get("cap")
    if cap is not None:
        if not (isinstance(cap, list | tuple) and len(cap) == 2 and
                all(isinstance(x, int | float) and not isinstance(x, bool) for x in cap) and cap[0] <= cap[1]):
            raise ConfigError(f"{where}.cap", f"expected [low, high] in the metric's unit, got {cap!r}")
        kwargs["cap"] = (float(cap[0]), float(cap[1]))
    margin, relative = _margin(where, table.get("margin"))
    reference = table.get("reference")
    if reference is not None and (not isinstance(reference, int | float) or isinstance(reference, bool)):
        raise ConfigError(f"{where}.reference", f"expected a number in the metric's unit, got {reference!r}")
    return Claim(**({"b": {}} | kwargs), margin=margin, margin_relative=relative,
                 reference=None if reference is None else float(reference))


def claims_from_tables(tables: Iterable[Mapping[str, Any]], path: str = "claims") -> tuple[Claim, ...]:
    """Claims from a TOML array of tables (``[[claims]]``); the ids must be unique."""
    out = tuple(claim_from_table(t, path) for t in tables)
    ids = [c.id for c in out]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup is not None:
        raise ConfigError(f"{path}.{dup}.id", "used by two claims: give each claim its own id")
    return out


def _field(where: str, key: str, value: Any) -> Any:
    if key in ("a", "b", "conditions"):
        if not isinstance(value, Mapping) or not all(isinstance(v, Value | list | tuple) for v in value.values()):
            raise ConfigError(f"{where}.{key}", f"expected a table axis = value, e.g. {{ aqm = \"pie\" }}, got "
                              f"{value!r}")
        if key != "conditions" and any(isinstance(v, list | tuple) for v in value.values()):
            raise ConfigError(f"{where}.{key}", "an arm is one cell: one value per axis (lists go in conditions)")
        return dict(value)
    if key in ("pair_by", "strata"):
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}.{key}", f"expected a list of column names, e.g. [\"trace\"], got {value!r}")
        return tuple(value)
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key}", f"expected a string, got {value!r}")
    return value


def _margin(where: str, value: Any) -> tuple[float | None, bool]:
    if value is None:
        return None, False
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            return float(value.strip()[:-1]) / 100, True
        except ValueError:
            pass
    elif isinstance(value, int | float) and not isinstance(value, bool):
        return float(value), False
    raise ConfigError(f"{where}.margin", f"expected a number (the metric's unit) or a percentage like \"5%\", got "
                      f"{value!r}")


# --- the data of one claim ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """A claim's sessions on the analysis scale (log for ratio claims), saturated ones left out.
    ``diffs``: the paired differences a - b (paired claims); ``groups``: (a, b) per stratum (unpaired)."""

    a: np.ndarray
    b: np.ndarray
    diffs: np.ndarray | None = None
    groups: tuple[tuple[np.ndarray, np.ndarray], ...] = ()
    reference: float = math.nan  # arm b's median on the metric's scale, or a one-sample claim's constant (a
    # relative margin's base)
    n_saturated: int = 0
    note: str = ""
    blocks: int = 0  # the blocks the claim's sessions came from (0: no block column)
    pairs: int = 0  # a share of pairs: the pairs formed (all alike: none counts when only unlike pairs do)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """A claim judged at one look. ``effect`` and ``ci`` are on the claim's scale (a difference, or a ratio a / b);
    ``more_needed`` counts pairs (paired) or sessions per arm (unpaired) still to run, None when decided or when
    the measured spread cannot say. In a sequential run they arrive block by block, at the rate so far, and each
    look until then spends its alpha: the count is the fewest that decide at the look where they would all be in
    (:func:`_more_needed`)."""

    claim: Claim
    verdict: str
    effect: float | None
    ci: tuple[float, float] | None
    ci_level: float
    p: float | None
    alpha: float
    test: str
    n_a: int
    n_b: int
    n_pairs: int | None
    n_saturated_excluded: int
    more_needed: int | None
    look: int | None = None  # the look of a sequential run this verdict comes from; None: a fixed-size analysis
    note: str = ""
    # Holm (:func:`step_down`): the family's alpha share of the claims judged together (alpha x their number / the
    # family's size), the family's claims open when this verdict was reached (its level: the share / open, spent
    # over the looks), and the family's size
    family_alpha: float | None = None
    family_open: int | None = None
    family_size: int | None = None
    # a sequential run's claim decided at an earlier look: its effect and CI on all the sessions (at the level of
    # the verdict), beside the decision (:func:`replay_looks`); None when the verdict's look had them all
    all_effect: float | None = None
    all_ci: tuple[float, float] | None = None
    all_n: int | None = None

    @property
    def more_unit(self) -> str:
        if self.claim.worst_over:  # one value per pair_by key (a block: "blocks"), its worst case
            return f"{'/'.join(self.claim.pair_by)}s"
        return "sessions" if self.claim.one_sample else "pairs" if self.claim.paired else "sessions per arm"


def evaluate(claims: Sequence[Claim], sessions: pd.DataFrame, *, look: int | None = None, alpha: float = 0.05,
             power: float = 0.8) -> list[Verdict]:
    """Judge every claim on ``sessions`` (one row per session), the claims of one family with Holm's step-down
    (:func:`step_down`).

    ``look``: in a sequential run, how many times the claims have been judged on the growing sessions, this time
    included (1, 2, ...): alpha is spent as in :mod:`.sequential`. A report of a sequential run passes the last
    look's number (or keeps the verdicts of :func:`keep_decided`), never None: None is one
    fixed-size analysis at ``alpha``, right only when the number of sessions was fixed before any was judged."""
    samples = {c.id: sample(c, sessions) for c in claims}
    found = step_down(claims, samples, {c.id: look for c in claims}, alpha=alpha, power=power)
    return [found[c.id] for c in claims]


def in_families(study: str, declared: Sequence[Claim], selected: Sequence[Claim]) -> tuple[Claim, ...]:
    """``selected`` (some of ``declared``, a study's claims) each in its family: the paper's findings, all its
    experiments together (``study``), or its fidelity checks (our models against a reference: a family of their
    own, ``"<study> (fidelity)"``, never the paper's verdicts); ``family_size`` counts the family's declared claims."""
    sizes = {kind: sum(c.kind == kind for c in declared) for kind in KINDS}
    return tuple(replace(c, family=study if c.kind == PAPER else f"{study} ({c.kind})", family_size=sizes[c.kind])
                 for c in selected)


def family_shares(claims: Sequence[Claim], alpha: float) -> dict[str, tuple[str, float, int]]:
    """Per claim id: its family's key, the family's alpha share of the claims judged together, and the family's
    size. A study's family (:attr:`Claim.family`, set by ``Study.claims_for``) has ``family_size`` claims over all
    its experiments; the claims of one experiment, judged together, get alpha x their number / that size (a
    weighted Bonferroni split of the family's alpha over its experiments), and Holm's step-down within them. A
    claim of no family (``family`` empty) is a family of its own at ``alpha``."""
    counts: dict[str, int] = {}
    for c in claims:
        if c.family:
            counts[c.family] = counts.get(c.family, 0) + 1
    out = {}
    for c in claims:
        if not c.family:
            out[c.id] = (f"claim:{c.id}", alpha, 1)
            continue
        size = max(c.family_size, counts[c.family])
        out[c.id] = (c.family, alpha * counts[c.family] / size, size)
    return out


def step_down(claims: Sequence[Claim], samples: Mapping[str, Sample], looks: Mapping[str, int | None], *,
              alpha: float, power: float = 0.8, closed: Mapping[str, Verdict] | None = None) -> dict[str, Verdict]:
    """Holm's step-down inside the alpha spending over looks: the verdicts of the open ``claims`` on their
    ``samples``, each at its own look (``looks``: None for a fixed-size analysis).

    Within a family (:func:`family_shares`: its alpha share ``A`` of the claims judged together) with ``r`` claims
    still open (not decided at an earlier look: ``closed``), every open claim is judged at the level
    ``look_alpha(k, A / r)`` of its look ``k`` (``A / r`` itself when fixed-size); the claims that decide leave,
    and those still open are judged again at ``A / (r - d)``, until a pass decides none. A claim decided keeps the
    verdict of the level it decided at. This is Holm's procedure, the test of each claim being its own sequential
    test at its share of alpha: by the union bound over the looks, each claim's chance of a false decision at
    share ``A / r`` is at most ``A / r``; at the first false decision in the family, the claims still open are at
    least the true ones, so the family errs with at most ``A`` (Holm's argument; a claim decided in the right
    direction passes its share on). A decision made against a margin (equivalence, futility) passes its share on
    too, which Holm's argument covers only when its complementary hypothesis is false: ``bench/family_error.py``
    checks the family-wise error by simulation with such claims in the family."""
    closed = closed or {}
    shares = family_shares(claims, alpha)
    groups: dict[str, list[Claim]] = {}
    for c in claims:
        groups.setdefault(shares[c.id][0], []).append(c)
    out: dict[str, Verdict] = {}
    for members in groups.values():
        _, share, size = shares[members[0].id]
        still = [c for c in members if c.id not in closed]
        while still:
            r = len(still)
            decided = []
            for c in still:
                v = _judge_at(c, samples[c.id], looks[c.id], share / r, power)
                out[c.id] = replace(v, family_alpha=share, family_open=r, family_size=size)
                if v.verdict in seq.DECIDED:
                    decided.append(c.id)
            if not decided:
                break
            still = [c for c in still if c.id not in decided]
    return out


def _judge_at(c: Claim, s: Sample, look: int | None, share: float, power: float) -> Verdict:
    """``c`` on ``s`` at its look's level of ``share`` (alpha spent over the looks; fixed-size: ``share``)."""
    if look is None:
        return judge(c, s, alpha=share, alpha_next=share, power=power)
    return judge(c, s, alpha=seq.look_alpha(look, share), alpha_next=seq.look_alpha(look + 1, share), power=power,
                 look=look, alpha_total=share)


def left_out(sessions: pd.DataFrame) -> pd.Series:
    """The sessions every claim leaves out: the CPU-saturated ones (``saturated`` True; unknown, NaN, counts as not
    saturated; a table without the column has none)."""
    if SATURATED not in sessions.columns:
        return pd.Series(False, index=sessions.index, dtype=bool)
    return sessions[SATURATED].eq(True)


def sample(claim: Claim, sessions: pd.DataFrame) -> Sample:
    """The claim's sessions from the per-session table: its conditions, its arms, saturated ones out."""
    _check_columns(claim, sessions)
    if claim.versus:
        return _interaction(claim, sessions)
    rows = sessions[_matches(sessions, claim.conditions)]
    saturated = left_out(rows)
    in_arms = _matches(rows, claim.a) if claim.one_sample else _matches(rows, claim.a) | _matches(rows, claim.b)
    n_saturated = int((saturated & in_arms).sum())  # a one-sample claim's empty b would match every session
    rows = rows[~saturated]
    for cell in claim.exclude:
        rows = rows[~_matches(rows, cell)]
    rows_a, rows_b = rows[_matches(rows, claim.a)], rows[_matches(rows, claim.b)]
    note = _empty_note(claim, sessions, rows_a, rows_b)
    blocks = int(pd.concat([rows_a, rows_b])[BLOCK].nunique()) if BLOCK in rows.columns else 0
    values_a, values_b = _scaled(claim, rows_a), _scaled(claim, rows_b)
    if values_a is None or values_b is None:
        note = f"{claim.metric} <= 0 in some sessions: a ratio needs positive values (declare scale = \"diff\")"
        return Sample(np.array([]), np.array([]), None, (), math.nan, n_saturated, note, blocks)
    if claim.share in ONE_ARM_SHARES:  # each session of arm a counted above / below the threshold
        a = values_a.to_numpy()
        assert claim.threshold is not None and claim.paper_share is not None
        hit = a > claim.threshold if claim.share == "above" else a < claim.threshold
        return Sample(a, np.array([]), hit.astype(float) - claim.paper_share, (), claim.paper_share, n_saturated,
                      note, blocks)
    if claim.worst_over:  # "in all cases": per key, the worst case's mean
        assert claim.reference is not None
        a = _worst(claim, rows_a.loc[values_a.index].assign(_v=values_a))
        ref = math.log(claim.reference) if claim.scale == "ratio" else claim.reference
        return Sample(a, np.array([]), a - ref, (), claim.reference, n_saturated, note, blocks)
    if claim.reference is not None:  # one sample: each session against the constant
        ref = math.log(claim.reference) if claim.scale == "ratio" else claim.reference
        a = values_a.to_numpy()
        return Sample(a, np.array([]), a - ref, (), claim.reference, n_saturated, note, blocks)
    reference = float(rows_b[claim.metric].median()) if len(rows_b) else math.nan
    base = Sample(values_a.to_numpy(), values_b.to_numpy(), reference=reference, n_saturated=n_saturated, note=note,
                  blocks=blocks)
    rows_a, rows_b = rows_a.loc[values_a.index].assign(_v=values_a), rows_b.loc[values_b.index].assign(_v=values_b)
    if claim.share:
        return _shared(claim, base, rows_a, rows_b)
    if claim.paired:
        return _paired(claim, base, rows_a, rows_b)
    if claim.strata:
        return _stratified(claim, base, rows_a, rows_b)
    return base


def _interaction(claim: Claim, sessions: pd.DataFrame) -> Sample:
    """An interaction (``versus``): per strata + pair_by key, the paired effect a - b at X (``conditions``) less
    the same effect at Y (``versus`` over them), on the claim's scale (log: the ratio of the two ratios). ``a`` and
    ``b`` are the keys' effects at X and at Y; ``diffs`` their differences, judged as paired differences are."""
    at_y = {**claim.conditions, **claim.versus}
    cases = [_keyed_effects(claim, sessions, cond) for cond in (claim.conditions, at_y)]
    n_saturated = sum(n for _, n, _ in cases)
    blocks = int(sessions[_matches(sessions, claim.conditions) | _matches(sessions, at_y)][BLOCK].nunique()) \
        if BLOCK in sessions.columns else 0
    (x, _, note_x), (y, _, note_y) = cases
    if x is None or y is None:
        note = f"{claim.metric} <= 0 in some sessions: a ratio needs positive values (declare scale = \"diff\")"
        return Sample(np.array([]), np.array([]), np.array([]), (), math.nan, n_saturated, note, blocks)
    both = x.index.intersection(y.index)
    effect_x, effect_y = x.loc[both].to_numpy(), y.loc[both].to_numpy()
    notes = [f"at {_cell(claim.conditions)}: {note_x}" if note_x else "",
             f"at {_cell(claim.versus)}: {note_y}" if note_y else "",
             f"{len(x) - len(both)} keys at X, {len(y) - len(both)} at Y without the other case"
             if len(x) > len(both) or len(y) > len(both) else ""]
    reference = float(np.median(effect_y)) if len(effect_y) else math.nan
    return Sample(effect_x, effect_y, effect_x - effect_y, (), reference, n_saturated,
                  "; ".join(n for n in notes if n), blocks)


def _keyed_effects(claim: Claim, sessions: pd.DataFrame, conditions: Mapping[str, Value | tuple[Value, ...]]
                   ) -> tuple[pd.Series | None, int, str]:
    """Under ``conditions``: the paired effect a - b per strata + pair_by key (each arm's sessions under a key
    averaged first, as :func:`_paired`), the saturated sessions of the arms left out, and a note when an arm has
    none (None: a ratio claim with a value <= 0)."""
    rows = sessions[_matches(sessions, conditions)]
    saturated = left_out(rows)
    n_saturated = int((saturated & (_matches(rows, claim.a) | _matches(rows, claim.b))).sum())
    rows = rows[~saturated]
    for cell in claim.exclude:
        rows = rows[~_matches(rows, cell)]
    rows_a, rows_b = rows[_matches(rows, claim.a)], rows[_matches(rows, claim.b)]
    note = _empty_note(claim, sessions, rows_a, rows_b)
    key = list(claim.strata + claim.pair_by)
    means = []
    for arm in (rows_a, rows_b):
        values = _scaled(claim, arm)
        if values is None:
            return None, n_saturated, note
        means.append(arm.loc[values.index].assign(_v=values).groupby(key, dropna=False)["_v"].mean())
    return (means[0] - means[1]).dropna(), n_saturated, note


def _worst(claim: Claim, rows: pd.DataFrame) -> np.ndarray:
    """Per pair_by key, the worst of its cases' means (over ``worst_over``): the smallest for ``a > reference``,
    the largest for ``a < reference``, the farthest from it (either way) for an equivalence claim."""
    if rows.empty:
        return np.array([])
    cases = rows.groupby(list(claim.pair_by) + list(claim.worst_over), dropna=False)["_v"].mean()
    ref = math.log(claim.reference) if claim.scale == "ratio" and claim.reference else float(claim.reference or 0.0)
    keys = cases.index.droplevel(list(range(len(claim.pair_by), cases.index.nlevels)))
    out = []
    for _, group in cases.groupby(keys, dropna=False):
        values = group.to_numpy()
        if claim.expect == seq.GREATER:
            out.append(values.min())
        elif claim.expect == seq.LESS:
            out.append(values.max())
        else:
            out.append(values[np.argmax(np.abs(values - ref))])
    return np.asarray(out, dtype=float)


def _shared(claim: Claim, base: Sample, rows_a: pd.DataFrame, rows_b: pd.DataFrame) -> Sample:
    """A share of pairs: each pair (as :func:`_paired` forms them) lower / alike / higher by the tie band, the
    pairs in the claimed category as 1, the others 0 (of all pairs, or of those not alike), less the paper's
    share: the sample the proportion test judges. The counts go in the note."""
    key = list(claim.strata + claim.pair_by)
    mean_a = rows_a.groupby(key, dropna=False)["_v"].mean()
    mean_b = rows_b.groupby(key, dropna=False)["_v"].mean()
    both = mean_a.index.intersection(mean_b.index)
    a, b = mean_a.loc[both].to_numpy(), mean_b.loc[both].to_numpy()
    d = a - b
    band = (claim.tie or 0.0) * (np.abs(b) if claim.tie_relative else 1.0)
    scale = 1e-9 * (float(np.max(np.abs(np.concatenate([a, b])))) if len(a) else 1.0) or 1e-9
    lower, higher = d < -band - scale, d > band + scale
    alike = ~lower & ~higher
    hit = {"a lower": lower, "a higher": higher, "alike": alike}[claim.share]
    keep = ~alike if claim.share_of == "unlike" else np.ones(len(d), dtype=bool)
    assert claim.paper_share is not None
    counts = f"{len(d)} pairs: {int(lower.sum())} a lower, {int(alike.sum())} alike, {int(higher.sum())} a higher"
    note = "; ".join(x for x in (base.note, counts) if x)
    return Sample(base.a, base.b, hit[keep].astype(float) - claim.paper_share, (), claim.paper_share,
                  base.n_saturated, note, base.blocks, len(d))


def _check_columns(claim: Claim, sessions: pd.DataFrame) -> None:
    needed = [("metric", claim.metric), ("saturated", SATURATED)] + ([("per", claim.per)] if claim.per else [])
    needed += [(key, col) for key in ("a", "conditions", "pair_by", "strata", "worst_over")
               for col in getattr(claim, key)]
    for key, col in needed:
        if col not in sessions.columns:
            raise ConfigError(claim.where(key), f"the session table has no column {col!r} (it has "
                              f"{', '.join(map(str, sessions.columns))})")


def _matches(rows: pd.DataFrame, cell: Mapping[str, Value | tuple[Value, ...]]) -> pd.Series:
    mask = pd.Series(True, index=rows.index)
    for axis, value in cell.items():
        mask &= rows[axis].isin(value if isinstance(value, tuple) else (value,))
    return mask


def _empty_note(claim: Claim, sessions: pd.DataFrame, rows_a: pd.DataFrame, rows_b: pd.DataFrame) -> str:
    for arm, rows in (("a", rows_a), ("b", rows_b)):
        if len(rows) == 0 and not (arm == "b" and claim.one_sample):
            cell = getattr(claim, arm)
            seen = {axis: sorted(map(str, sessions[axis].dropna().unique())) for axis in cell}
            return f"no unsaturated session in arm {arm} {dict(cell)} under the conditions (values seen: {seen})"
    return ""


def _scaled(claim: Claim, rows: pd.DataFrame) -> pd.Series | None:
    values = rows[claim.metric].astype(float)
    if claim.per:  # the metric per unit of another: conditional on it
        values = values / rows[claim.per].astype(float).where(lambda x: x != 0)
    values = values.dropna()  # a session without the metric has no say
    if claim.scale == "diff":
        return values
    return None if (values <= 0).any() else np.log(values)


def _paired(claim: Claim, base: Sample, rows_a: pd.DataFrame, rows_b: pd.DataFrame) -> Sample:
    key = list(claim.strata + claim.pair_by)
    mean_a = rows_a.groupby(key, dropna=False)["_v"].mean()
    mean_b = rows_b.groupby(key, dropna=False)["_v"].mean()
    both = mean_a.index.intersection(mean_b.index)
    diffs = (mean_a.loc[both] - mean_b.loc[both]).to_numpy()
    note = base.note
    if len(mean_a) > len(both) or len(mean_b) > len(both):
        note = note or f"{len(mean_a) - len(both)} keys of a, {len(mean_b) - len(both)} of b without a partner"
    return Sample(base.a, base.b, diffs, (), base.reference, base.n_saturated, note, base.blocks)


def _stratified(claim: Claim, base: Sample, rows_a: pd.DataFrame, rows_b: pd.DataFrame) -> Sample:
    strata = list(claim.strata)
    by_a = {k: g["_v"].to_numpy() for k, g in rows_a.groupby(strata, dropna=False)}
    by_b = {k: g["_v"].to_numpy() for k, g in rows_b.groupby(strata, dropna=False)}
    groups = tuple((by_a[k], by_b[k]) for k in sorted(set(by_a) & set(by_b), key=str))
    return Sample(base.a, base.b, None, groups, base.reference, base.n_saturated, base.note, base.blocks)


# --- the verdict -------------------------------------------------------------------------------------------------


def judge(claim: Claim, s: Sample, *, alpha: float, alpha_next: float, power: float = 0.8,
          look: int | None = None, alpha_total: float | None = None) -> Verdict:
    """The verdict of ``claim`` on its sample at level ``alpha`` (this look's); ``alpha_next`` sizes the sessions
    still needed (the next look's level). ``alpha_total``: a sequential run's alpha, spent over the looks after
    ``look`` while the sessions still needed arrive (:func:`_more_needed`)."""
    n_pairs = None if s.diffs is None else len(s.diffs)
    counts: dict[str, Any] = dict(n_a=len(s.a), n_b=len(s.b), n_pairs=n_pairs, n_saturated_excluded=s.n_saturated,
                                  look=look)
    test = _test(claim, s)
    if test is None and claim.share and s.pairs:  # pairs, but none outside the tie band to count
        return Verdict(claim=claim, verdict=seq.UNINFORMATIVE, effect=None, ci=None, ci_level=_level(claim, alpha),
                       p=None, alpha=alpha, test=_test_name(claim), more_needed=None,
                       note=f"all {s.pairs} pairs alike within the tie band: no pair to count; {s.note}", **counts)
    if test is None:
        return Verdict(claim=claim, verdict=seq.NO_DATA, effect=None, ci=None, ci_level=_level(claim, alpha),
                       p=None, alpha=alpha, test=_test_name(claim), more_needed=None, note=s.note, **counts)
    bounds = _bounds(claim, s)
    d = seq.decide(test, claim.expect, alpha, bounds)
    if claim.share and d.verdict == seq.UNDECIDED and not _share_can_decide(claim, test.n, alpha, bounds):
        d = replace(d, verdict=seq.TOO_FEW)  # no count of this many pairs could decide at this level
    held = held_back(claim, s, alpha) if d.verdict in seq.DECIDED else ""
    if held:
        d = replace(d, verdict=seq.UNDECIDED, futile=False)
    why = uninformative(claim, s)
    if why:
        effect, ci = _shown(claim, d.effect), (_shown(claim, d.ci[0]), _shown(claim, d.ci[1]))
        return Verdict(claim=claim, verdict=seq.UNINFORMATIVE, effect=effect, ci=ci, ci_level=d.ci_level, p=d.p,
                       alpha=alpha, test=d.test, more_needed=None, note="; ".join(x for x in (why, s.note) if x),
                       **counts)
    spend = None
    if look is not None and alpha_total is not None:  # the k-th look from now; this one spent nothing if too few
        spent, total = look - (d.verdict == seq.TOO_FEW), alpha_total
        spend = lambda k: seq.look_alpha(spent + k, total)  # noqa: E731
    more = None if d.verdict in seq.DECIDED else _more_needed(claim, s, d, bounds, alpha_next, power, spend)
    if held:  # the test rejected: what it still lacks is the rule's (ties, untied pairs)
        rule = held_more(claim, s, alpha_next)
        more = None if rule is None else max(more or 1, rule)
    effect, ci = _shown(claim, d.effect), (_shown(claim, d.ci[0]), _shown(claim, d.ci[1]))
    note = "; ".join(x for x in ("no effect of the margin's size in the claimed direction" if d.futile else "",
                                 held, s.note) if x)
    return Verdict(claim=claim, verdict=d.verdict, effect=effect, ci=ci, ci_level=d.ci_level, p=d.p, alpha=alpha,
                   test=d.test, more_needed=more, note=note, **counts)


MAX_TIED_SHARE = 0.5  # held_back: a decision on more tied pairs than this is held back


def _ties(s: Sample) -> tuple[int, int, bool]:
    """(n, tied, paired): pairs (or sessions per arm) and how many of them are tied (a zero difference; unpaired:
    the share of a - b differences that are 0, applied to n)."""
    paired = s.diffs is not None
    if paired:
        assert s.diffs is not None
        n = len(s.diffs)
        scale = 1e-9 * (float(np.max(np.abs(s.diffs))) or 1.0) if n else 1e-9
        return n, int((np.abs(s.diffs) <= scale).sum()), True
    n = min(len(s.a), len(s.b))
    d = np.subtract.outer(s.a, s.b).ravel() if len(s.a) and len(s.b) else np.array([])
    share = float((np.abs(d) <= 1e-9 * (float(np.max(np.abs(d))) or 1.0)).mean()) if len(d) else 0.0
    return n, int(round(share * n)), False


def held_more(claim: Claim, s: Sample, alpha: float) -> int | None:
    """The sessions a held-back claim still needs for the rule alone (:func:`held_back`), at the tie share so far:
    enough that its untied ones reach the test's fewest at ``alpha``; None when more than half are tied (at that
    share no number of sessions clears the rule)."""
    n, tied, paired = _ties(s)
    fewest = seq.fewest_decisive(seq.side_alpha(claim.expect, alpha), paired=paired)
    if claim.expect == seq.EQUIVALENT:
        return max(1, fewest - n)
    if n == 0 or tied > MAX_TIED_SHARE * n:
        return None
    return max(1, math.ceil(fewest / (1 - tied / n)) - n)


def held_back(claim: Claim, s: Sample, alpha: float) -> str:
    """Why a decision the test reached at this look does not count yet, or "" (the early-decision rule, issue 53).

    A tie (a zero paired difference, or against the reference; unpaired: an a - b difference of 0) carries no
    sign, so a decision carried by a few untied pairs among many ties does not hold as pairs are added. A claim is
    decided at a look only when (directional claims) at most half its pairs are tied and its untied pairs alone
    reach the fewest with which the exact test can reject at the look's level (:func:`.sequential.fewest_decisive`:
    6 pairs at 0.0304 two-sided, 15 at 0.00011), or (equivalence claims, where zeros are evidence of no
    difference) its pairs reach that fewest (for the paired tests Pratt's null given the ties already needs that
    many untied pairs to reject; the unpaired ones do not). A proportion claim's rule is the test's own (some count of its
    pairs must be able to decide: too few otherwise). Held back, the claim is undecided at that look (which spends
    its alpha, as any look that could decide)."""
    if claim.share:
        return ""
    n, tied, paired = _ties(s)
    fewest = seq.fewest_decisive(seq.side_alpha(claim.expect, alpha), paired=paired)
    unit = "pairs" if paired else "sessions per arm"
    if claim.expect == seq.EQUIVALENT:
        return "" if n >= fewest else f"held back: {n} {unit}, fewer than the {fewest} the test needs at this level"
    if tied > MAX_TIED_SHARE * n:
        return f"held back: {tied} of {n} {unit} tied (more than half)"
    if n - tied < fewest:
        return (f"held back: {n - tied} untied {unit} of {n}, fewer than the {fewest} with which the test alone "
                "could reject at this level")
    return ""


def uninformative(claim: Claim, s: Sample) -> str:
    """Why the claim's metric cannot tell its arms apart in this sample, or "": it takes one value in every session
    of the arms (identical by construction, or at a floor), every one of them lies within the metric's declared
    ``cap``, or (a directional claim) every pair is tied. Such a claim is *uninformative*: it neither agrees nor
    contradicts, whatever a test on it says (a CI of 0 [0, 0] from no spread is no evidence of no difference)."""
    values = np.concatenate([s.a, s.b]) if not claim.one_sample else s.a
    if len(values) < 2:
        return ""
    snapped = np.round(values / (1e-9 * (float(np.max(np.abs(values))) or 1.0)))
    if len(np.unique(snapped)) == 1:
        shown = math.exp(float(values[0])) if claim.scale == "ratio" else float(values[0])
        return f"no spread: all {len(values)} sessions have {claim.metric} = {_num(shown)}"
    if claim.cap is not None:
        low, high = (math.log(x) if claim.scale == "ratio" else x for x in claim.cap)
        if bool(((values >= low - 1e-12) & (values <= high + 1e-12)).all()):
            return f"at its cap: all {len(values)} sessions' {claim.metric} within [{_num(claim.cap[0])}, " \
                   f"{_num(claim.cap[1])}]"
    if claim.expect != seq.EQUIVALENT and not claim.share and s.diffs is not None and len(s.diffs) > 1 and \
            bool((np.abs(s.diffs) <= 1e-9 * (float(np.max(np.abs(values))) or 1.0)).all()):
        return f"every pair tied ({len(s.diffs)} of {len(s.diffs)} differences 0)"
    return ""


def _share_can_decide(claim: Claim, n: int, alpha: float, bounds: tuple[float, float] | None) -> bool:
    assert claim.paper_share is not None
    return any(seq.decide(share_test(k, n, claim.paper_share), claim.expect, alpha, bounds).verdict in seq.DECIDED
               for k in range(n + 1))


def _test(claim: Claim, s: Sample) -> ShiftTest | None:
    if claim.share:
        if s.diffs is None or not len(s.diffs):
            return None
        assert claim.paper_share is not None
        return share_test(int(round(float((s.diffs + claim.paper_share).sum()))), len(s.diffs), claim.paper_share)
    if s.diffs is not None:
        return signed_rank(s.diffs) if len(s.diffs) else None
    if claim.strata:
        groups = [(a, b) for a, b in s.groups if len(a) and len(b)]
        if len(groups) > 1:
            return stratified_rank_sum(groups)
        return rank_sum(*groups[0]) if groups else None
    return rank_sum(s.a, s.b) if len(s.a) and len(s.b) else None


def _test_name(claim: Claim) -> str:
    name = "exact binomial" if claim.share else "wilcoxon signed-rank" if claim.paired else "mann-whitney U"
    return f"TOST ({name}), CI inside margin" if claim.expect == seq.EQUIVALENT else name


def _level(claim: Claim, alpha: float) -> float:
    return 1 - 2 * alpha if claim.expect == seq.EQUIVALENT else 1 - alpha


def _bounds(claim: Claim, s: Sample) -> tuple[float, float] | None:
    """The margin on the analysis scale (an equivalence margin, or a directional claim's smallest meant effect)."""
    if claim.margin is None:
        return None
    assert claim.margin is not None
    if claim.scale == "ratio":
        return -math.log1p(claim.margin), math.log1p(claim.margin)
    m = claim.margin * abs(s.reference) if claim.margin_relative else claim.margin
    return -m, m


def _shown(claim: Claim, x: float) -> float:
    """An effect on the claim's scale: a ratio (exp), a share (the paper's added back), or a difference."""
    if claim.share:
        return x + float(claim.paper_share or 0.0)
    return math.exp(x) if claim.scale == "ratio" else x


def _more_needed(claim: Claim, s: Sample, d: seq.Decision, bounds: tuple[float, float] | None, alpha_next: float,
                 power: float, spend: Callable[[int], float] | None = None) -> int | None:
    """Pairs (or sessions per arm) still to run. Fixed-size (``spend`` None): those that decide at ``alpha_next``.
    Sequential: they arrive at the rate so far (per block), a look after each block; the k-th look from now that
    spends alpha has ``spend(k)``, and a look whose sessions are too few for the exact test at that alpha spends
    nothing (as in :func:`replay`). The count is what decides at the first look by which that many have arrived
    (the power formula at that look's alpha, never below the fewest with which the exact test can reject there).
    With one pair per block the pairs still needed take as many looks, each at a smaller alpha: more than the
    formula at the next look's alpha says."""
    n_now = len(s.diffs) if s.diffs is not None else min(len(s.a), len(s.b))
    distance, sd = seq.decision_distance(d.effect, claim.expect, bounds), spread(s)

    def needed(alpha_look: float) -> int | None:
        return seq.sessions_for_power(distance=distance, sd=sd, alpha_side=seq.side_alpha(claim.expect, alpha_look),
                                      power=power, paired=s.diffs is not None)

    n = needed(alpha_next if spend is None else spend(1))
    if n is None:
        return None
    if spend is None or s.blocks < 1 or n_now < 1:
        return max(1, n - n_now)
    rate = n_now / s.blocks
    paired = s.diffs is not None
    # A look spends alpha only where its sessions could decide at all (not "too few", as in replay): block j from
    # now is judged at the alpha of the (spent(j) + 1)-th spending look, spent(j) counted over the blocks before
    # it; simulated for the first LOOKS_SIMULATED blocks, after which every look spends (by then the exact test's
    # fewest grow by ~2 log2 per doubling of the looks, the sessions by the rate per look)
    spent_before, spent = [], 0
    for j in range(1, LOOKS_SIMULATED + 1):
        spent_before.append(spent)
        if n_now + j * rate >= seq.fewest_decisive(seq.side_alpha(claim.expect, spend(spent + 1)), paired=paired):
            spent += 1

    def alpha_at(k: int) -> float:  # the alpha of the k-th look (block) from now
        return spend(1 + (spent_before[k - 1] if k <= LOOKS_SIMULATED else spent + k - 1 - LOOKS_SIMULATED))

    def short(k: int) -> bool:  # the sessions in at the k-th look from now do not decide there
        want = needed(alpha_at(k))
        return want is None or n_now + k * rate < want

    lo, k = 0, 1  # short(lo): now (0) did not decide. Once the sessions in decide at a look, they decide at every
    while short(k) and k < MAX_LOOKS_AHEAD:  # later one (they grow by the rate per look, what decides with the
        lo, k = k, 2 * k  # log of the looks): double, then bisect
    while k - lo > 1:
        mid = (lo + k) // 2
        lo, k = (mid, k) if short(mid) else (lo, mid)
    return max(1, (needed(alpha_at(k)) or 0) - n_now)


def spread(s: Sample) -> float:
    """The pilot's SD: of the paired differences, or pooled within the arms (and strata)."""
    if s.diffs is not None:
        return float(np.std(s.diffs, ddof=1)) if len(s.diffs) > 1 else math.nan
    groups = s.groups or ((s.a, s.b),)
    parts = [x for g in groups for x in g if len(x) > 0]
    dof = sum(len(x) - 1 for x in parts)
    return math.sqrt(sum(float(((x - x.mean()) ** 2).sum()) for x in parts) / dof) if dof > 0 else math.nan


def replay(claims: Sequence[Claim], sessions: pd.DataFrame, *, block: str = "block", alpha: float = 0.05,
           power: float = 0.8) -> list[Verdict]:
    """The verdicts of a sequential run (``run --until-decided``), recomputed from its sessions alone.

    A look follows each block: look after block ``k`` judges the sessions of blocks ``<= k``, each family's open
    claims with Holm's step-down (:func:`step_down`). A claim's own look count (its alpha,
    :func:`.sequential.look_alpha`) advances only at looks where it could have been decided (not "too few" or
    "no data": at those no data could reject, so they spend nothing of its alpha) on sessions its last counted
    look did not have (a block whose sessions of the claim's cells were all saturated, failed or unpaired gives the
    same test again at a smaller alpha: it rejects only where the last look did, so it spends nothing and the
    claim keeps that look's verdict; if its family's open claims fell since, it is judged again at that look
    with the larger share Holm gives it, as the step-down may test an earlier look again); a claim decided at a
    look keeps that decision (:func:`keep_decided`). The same sessions give the same verdicts, so a committed
    table of sessions regenerates the claim table."""
    if block not in sessions.columns:
        raise ConfigError(block, f"the sessions have no {block!r} column: a sequential run's sessions say their block")
    blocks = sorted(sessions[block].dropna().unique())
    if not blocks:
        return evaluate(claims, sessions, look=1, alpha=alpha, power=power)

    def samples_at(k: int, open_: Sequence[Claim]) -> dict[str, Sample]:
        upto = sessions[sessions[block] <= blocks[k]]
        return {c.id: sample(c, upto) for c in open_}

    return replay_looks(claims, samples_at, len(blocks), alpha=alpha, power=power)


def replay_looks(claims: Sequence[Claim], samples_at: Callable[[int, Sequence[Claim]], Mapping[str, Sample]],
                 n_looks: int, *, alpha: float = 0.05, power: float = 0.8) -> list[Verdict]:
    """:func:`replay`'s looks on given samples: ``samples_at(k, open claims)`` are the open claims' samples after
    block ``k`` (0, 1, ... ``n_looks - 1``). The simulations of ``bench/family_error.py`` run this same code."""
    looks = dict.fromkeys((c.id for c in claims), 1)
    counted: dict[str, tuple[int | None, ...]] = {}  # the sessions each claim's last counted look judged
    current: dict[str, Verdict] = {}
    for k in range(n_looks):
        closed = {cid: v for cid, v in current.items() if v.verdict in seq.DECIDED}
        open_ = [c for c in claims if c.id not in closed]
        samples = samples_at(k, open_)
        again = {c.id for c in open_ if counted.get(c.id) == sample_counts(c, samples[c.id])}
        at = {c.id: looks[c.id] - 1 if c.id in again else looks[c.id] for c in open_}
        found = step_down(claims, samples, at, alpha=alpha, power=power, closed=closed)
        for c in open_:
            v = found[c.id]
            if c.id in again:  # the same sessions as its last counted look: only a decision Holm now allows counts
                if v.verdict in seq.DECIDED:
                    current[c.id] = v
                continue
            current[c.id] = v
            if v.verdict not in seq.NOT_SPENDING:
                looks[c.id] += 1
                counted[c.id] = judged_sessions(v)
    return [_on_all(current[c.id], samples_at(n_looks - 1, [c])[c.id], power) if n_looks else current[c.id]
            for c in claims]


def _on_all(v: Verdict, s: Sample, power: float) -> Verdict:
    """``v`` with its effect and CI on all the sessions ``s`` (at ``v``'s level), when its look had fewer."""
    if sample_counts(v.claim, s) == judged_sessions(v):
        return v
    on_all = judge(v.claim, s, alpha=v.alpha, alpha_next=v.alpha, power=power)
    return replace(v, all_effect=on_all.effect, all_ci=on_all.ci, all_n=on_all.n_pairs if on_all.n_pairs is not None
                   else min(on_all.n_a, on_all.n_b))


def sample_counts(claim: Claim, s: Sample) -> tuple[int | None, ...]:
    """What a test on ``s`` would judge, as :func:`judged_sessions` counts it."""
    return (len(s.diffs),) if s.diffs is not None else (len(s.a), len(s.b))


def judged_sessions(v: Verdict) -> tuple[int | None, ...]:
    """What a verdict's test judged, as counts: its pairs (paired and one-sample claims), else the sessions per
    arm. The sessions of a sequential run only grow look by look, so equal counts are the same sessions."""
    return (v.n_pairs,) if v.n_pairs is not None else (v.n_a, v.n_b)


def keep_decided(previous: Sequence[Verdict], current: Sequence[Verdict]) -> list[Verdict]:
    """The current verdicts, except that a claim decided at an earlier look keeps that decision: a sequential
    run stops a claim at its first decision (the error bound covers "decided at some look"), and later looks, run
    for other claims at a smaller alpha, neither undo nor re-decide it."""
    decided = {v.claim.id: v for v in previous if v.verdict in seq.DECIDED}
    return [decided.get(v.claim.id, v) for v in current]


@dataclass(frozen=True)
class CellNeed:
    """A cell (arm x conditions: axis -> value, or the values it may take) that undecided claims need sessions in.
    ``sessions``: the most any of them asked for (pairs count once per arm), None when none could say."""

    cell: Mapping[str, Value | tuple[Value, ...]]
    sessions: int | None
    claims: tuple[str, ...]


def cells_needed(verdicts: Sequence[Verdict]) -> list[CellNeed]:
    """The cells still needing sessions: both arms (under the claim's conditions) of every claim not yet decided.
    For ``--until-decided``: add blocks only to these cells, stop when the list is empty."""
    need: dict[tuple[tuple[str, object], ...], tuple[dict[str, Value | tuple[Value, ...]], list[int | None],
                                                       list[str]]] = {}
    for v in verdicts:
        if v.verdict in seq.DECIDED or v.verdict == seq.UNINFORMATIVE:  # more of a metric with no spread decides
            continue  # nothing
        cases = [v.claim.conditions] + ([{**v.claim.conditions, **v.claim.versus}] if v.claim.versus else [])
        for where in cases:  # an interaction needs its pairs at both of its cases
            for arm in (v.claim.a,) if v.claim.one_sample else (v.claim.a, v.claim.b):
                cell = {**where, **arm}
                key = tuple(sorted(cell.items()))
                entry = need.setdefault(key, (cell, [], []))
                entry[1].append(v.more_needed)
                entry[2].append(v.claim.id)
    return [CellNeed(cell, max((n for n in ns if n is not None), default=None), tuple(ids))
            for cell, ns, ids in need.values()]


# --- the table ---------------------------------------------------------------------------------------------------


def more_text(more: int | float | None, unit: str, suffix: str = "") -> str:
    """The sessions still needed as a table shows them: "+N unit", or past :data:`PRACTICAL_MORE` that no practical
    study decides the claim (its effect sits near its decision boundary); "—" when decided or unknown. ``suffix``
    follows the unit (" needed")."""
    if more is None or (isinstance(more, float) and math.isnan(more)):
        return "—"
    if more > PRACTICAL_MORE:
        return f"> {PRACTICAL_MORE} {unit}{suffix}: effect near its boundary, not decidable at a practical size"
    return f"+{int(more)} {unit}{suffix}"


def verdict_table(verdicts: Sequence[Verdict]) -> str:
    """The verdicts as a Markdown table: claim | paper | ours: effect [CI] | p | n | verdict | still needed."""
    lines = ["| claim | paper | ours: effect [CI] | p (level: the family's share / its open claims, at the look) | n | "
             "verdict | sessions still needed |",
             "|---|---|---|---|---|---|---|"]
    for v in verdicts:
        c = v.claim
        paper = f"{c.statement} ({c.figure})" + (f": {c.paper_value}" if c.paper_value else "")
        p = "—" if v.p is None else f"{_num(v.p)} ({level_text(v)})"
        more = more_text(v.more_needed, v.more_unit)
        cells = [f"{c.id}: {judged_text(c)}" + _margin_text(c), paper,
                 _ours(v), p, _n(v), _verdict_text(v), more]
        lines.append("| " + " | ".join(x.replace("|", "\\|") for x in cells) + " |")
    return "\n".join(lines) + "\n"


def level_text(v: Verdict) -> str:
    """The level a verdict was judged at, and where it comes from: the family's share (Holm) spent at its look."""
    if v.family_alpha is None or v.family_open is None:
        return _num(v.alpha)
    share = f"{_num(v.family_alpha)} / {v.family_open} open of {v.family_size}"
    return f"{_num(v.alpha)}: {share}" + (f", look {v.look}" if v.look is not None else "")


def _verdict_text(v: Verdict) -> str:
    look = f" at look {v.look}" if v.look is not None else ""
    return v.verdict + look + (f" ({v.note})" if v.note else "")


def _cell(cell: Mapping[str, Value | tuple[Value, ...]]) -> str:
    return ", ".join(f"{k}={v}" for k, v in cell.items())


def judged_text(c: Claim) -> str:
    """What the claim judges, in a line: its metric (per another), arms, form and expectation."""
    metric = c.metric + (f" per {c.per}" if c.per else "")
    out = [f"{metric}, {_cell(c.a)}"]
    if c.share in TWO_ARM_SHARES:
        tie = (f"{c.tie:.0%} of b" if c.tie_relative else _num(c.tie)) if c.tie else "0"
        of = "the pairs not alike" if c.share_of == "unlike" else "all pairs"
        out = [f"the share of {of} with {metric} {c.share} (alike: within {tie}), {_cell(c.a)} vs {_cell(c.b)}, "
               f"against the paper's {c.paper_share:.0%}"]
    elif c.share:
        out = [f"the share of {_cell(c.a)}'s sessions with {metric} {c.share} {_num(c.threshold or 0.0)}, against "
               f"the paper's {c.paper_share:.0%}"]
    elif c.versus:
        at_x = {k: c.conditions[k] for k in c.versus}
        out = [f"{metric}, the effect {_cell(c.a)} vs {_cell(c.b)} at {_cell(at_x)} less the same at "
               f"{_cell(c.versus)}, per {', '.join(c.pair_by)}"]
    elif c.worst_over:
        out = [f"{metric}, {_cell(c.a) or 'all sessions'}: the worst case over {', '.join(c.worst_over)} per "
               f"{', '.join(c.pair_by)} vs the constant {_num(c.reference or 0.0)}"]
    else:
        out = [f"{metric}, {_cell(c.a)} vs {_arm_b(c)}"]
    if c.exclude:
        out.append("without " + "; ".join(_cell(x) for x in c.exclude))
    return ", ".join(out) + f", {c.expect}"


def _arm_b(c: Claim) -> str:
    return _cell(c.b) if c.reference is None else f"the constant {_num(c.reference)}"


def _margin_text(c: Claim) -> str:
    post = f"; post hoc: {c.post_hoc}" if c.post_hoc else ""
    if c.margin is None:
        return post
    source = c.margin_source.split(":", 1)[0] or "source unstated"
    margin = f"{c.margin:.0%}" if c.margin_relative else _num(c.margin)
    return f" (margin {margin}, {source})" + post


def _ours(v: Verdict) -> str:
    if v.effect is None or v.ci is None:
        return "—"
    pre = "x" if v.claim.scale == "ratio" else ""
    if v.verdict == seq.TOO_FEW:  # the CI is unbounded: no n this small can reject at this look's alpha
        return f"{pre}{_num(v.effect)} (no {v.ci_level:.1%} CI at this n, {v.test})"
    lo, hi = (f"{pre}{_num(x)}" for x in v.ci)
    text = f"{pre}{_num(v.effect)} [{lo}, {hi}] ({v.ci_level:.1%} CI, {v.test})"
    if v.all_effect is not None and v.all_ci is not None:  # decided earlier: the same level's CI on all sessions
        text += f"; on all {v.all_n}: {pre}{_num(v.all_effect)} [{pre}{_num(v.all_ci[0])}, {pre}{_num(v.all_ci[1])}]"
    return text


def _n(v: Verdict) -> str:
    n = f"{v.n_pairs} pairs ({v.n_a} / {v.n_b} sessions)" if v.n_pairs is not None else f"{v.n_a} / {v.n_b}"
    return n + (f", {v.n_saturated_excluded} saturated out" if v.n_saturated_excluded else "")


def _num(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else ("inf" if x > 0 else "-inf")
