"""Our ``chromium`` policy beside Chromium itself (and ``firefox`` beside Firefox), session by session. Pure.

``experiments/racing_chromium.toml`` (and ``racing_chromium_queue.toml``)
play each condition with two players in one block: our player over
``race`` with the ``chromium`` policy (the study's policy ``chromium``) and
dash.js in Chromium 156 (``chromium_browser``); likewise our ``firefox``
policy and dash.js in Firefox ESR (``firefox_browser``, ``player =
"firefox"``). A *pair* is those two
sessions of one experiment, condition and block: the same link, firewall,
trace, origin and media, in the same randomized block.

Per pair (:func:`compare`):

- the protocol timeline, segment by segment: the share of the segments both
  sessions fetched (same stream and index) that the same protocol carried
  (``same_protocol``), and each side's share of segments over QUIC
  (``quic_segments``);
- RQvsT, the protocol switches along the segments (``proto_switches``), the
  stall time and the mean video bitrate of each side.

Each is judged against a margin fixed before the validation runs, the
racing study's own margins for "alike" (:mod:`.claims`: bitrate within
10 %, stall within 2 s) and ours for the racing: RQvsT within 0.10 (10 % of
the bytes), QUIC's share of segments within 0.10, at most one protocol
switch apart, >= 90 % of the common segments over the same protocol
(:data:`MARGINS`). A condition *agrees* when every pair is within every
margin (:func:`by_condition`); the study's claims (:mod:`.claims`) test the
same margins as equivalence claims on the pairs of all conditions pooled (an
exact paired test cannot decide an equivalence at alpha 0.05 with fewer than
5 pairs: 0.5^4 = 0.0625, so per condition the table describes, the pooled
claims decide).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from nest_experiments.studies.racing.sessions import BROWSER, FIREFOX_BROWSER, Session

OURS = "chromium"
REFERENCES = {OURS: BROWSER, "firefox": FIREFOX_BROWSER}  # our policy -> the browser whose racing it imitates


@dataclass(frozen=True, kw_only=True)
class Margin:
    metric: str
    label: str
    margin: float
    relative: bool = False  # a fraction of the browser's value (bitrate)
    at_least: bool = False  # a floor on the pair's value (same_protocol), not a bound on a difference

    def within(self, ours: float | None, browser: float | None) -> bool | None:
        """Whether the pair is within this margin (None: a side has no value)."""
        if self.at_least:
            return None if ours is None else ours >= self.margin
        if ours is None or browser is None:
            return None
        bound = self.margin * abs(browser) if self.relative else self.margin
        return abs(ours - browser) <= bound + 1e-9

    @property
    def text(self) -> str:
        if self.at_least:
            return f">= {self.margin:.0%}"
        return f"within {self.margin:.0%}" if self.relative else f"within {self.margin:g}"


MARGINS = (
    Margin(metric="same_protocol", label="segments over the same protocol", margin=0.90, at_least=True),
    Margin(metric="quic_segments", label="QUIC's share of segments", margin=0.10),
    Margin(metric="rqvst", label="RQvsT", margin=0.10),
    Margin(metric="proto_switches", label="protocol switches", margin=1.0),
    Margin(metric="stall", label="stall (s)", margin=2.0),
    Margin(metric="bitrate", label="bitrate (kbit/s)", margin=0.10, relative=True),
)


@dataclass(frozen=True, kw_only=True)
class Pair:
    experiment: str
    condition: str
    block: int
    ours: Session
    browser: Session

    @property
    def policy(self) -> str:
        return self.ours.policy

    def value(self, metric: str) -> tuple[float | None, float | None]:
        """(ours, the browser's) for a session metric; for ``same_protocol`` (a pair's metric) (share, None)."""
        if metric == "same_protocol":
            return same_protocol(self.ours, self.browser), None
        return self.ours.metrics.get(metric), self.browser.metrics.get(metric)

    def within(self) -> dict[str, bool | None]:
        return {m.metric: m.within(*self.value(m.metric)) for m in MARGINS}


def same_protocol(a: Session, b: Session) -> float | None:
    """The share of the segments both sessions fetched (stream, index) that one protocol carried in both."""
    pa = {(stream, index): p for stream, index, p in a.timeline}
    pb = {(stream, index): p for stream, index, p in b.timeline}
    common = pa.keys() & pb.keys()
    return None if not common else sum(pa[k] == pb[k] for k in common) / len(common)


def pairs(sessions: Sequence[Session]) -> list[Pair]:
    """Our policy's and its browser's session (:data:`REFERENCES`) of each (experiment, condition, block), where
    both exist."""
    keyed: dict[tuple[str, str, str, int], dict[str, Session]] = {}
    family = {**{ours: ours for ours in REFERENCES}, **{ref: ours for ours, ref in REFERENCES.items()}}
    for s in sessions:
        if s.policy in family:
            keyed.setdefault((family[s.policy], s.experiment, s.condition, s.block), {})[s.policy] = s
    return [Pair(experiment=e, condition=c, block=b, ours=two[ours], browser=two[REFERENCES[ours]])
            for (ours, e, c, b), two in sorted(keyed.items()) if ours in two and REFERENCES[ours] in two]


@dataclass(frozen=True, kw_only=True)
class ConditionAgreement:
    policy: str  # ours: chromium | firefox
    experiment: str
    condition: str
    pairs: tuple[Pair, ...]
    medians: dict[str, tuple[float | None, float | None]]  # metric -> (ours, browser); same_protocol: (share, None)
    within: dict[str, tuple[int, int]]  # metric -> (pairs within the margin, pairs with a value)

    @property
    def drifted(self) -> list[str]:
        """The metrics on which some pair is outside its margin."""
        return [m for m, (ok, n) in self.within.items() if ok < n]

    @property
    def verdict(self) -> str:
        if not any(n for _, n in self.within.values()):
            return "no data"
        return "agrees" if not self.drifted else "drifted: " + ", ".join(self.drifted)


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def by_condition(found: Sequence[Pair]) -> list[ConditionAgreement]:
    """Per (policy, experiment, condition): the pairs, the medians of each side, and how many pairs are within each
    margin."""
    out = []
    for key in sorted({(p.policy, p.experiment, p.condition) for p in found}):
        group = tuple(p for p in found if (p.policy, p.experiment, p.condition) == key)
        medians, within = {}, {}
        for m in MARGINS:
            values = [p.value(m.metric) for p in group]
            medians[m.metric] = (_median([o for o, _ in values]), _median([b for _, b in values]))
            verdicts = [v for p in group if (v := p.within()[m.metric]) is not None]
            within[m.metric] = (sum(verdicts), len(verdicts))
        out.append(ConditionAgreement(policy=key[0], experiment=key[1], condition=key[2], pairs=group,
                                      medians=medians, within=within))
    return out
