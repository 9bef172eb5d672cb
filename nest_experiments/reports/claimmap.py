"""A paper's claim map: every finding its text states, quoted, and what the study declares for it (pure).

Each paper study keeps the list of its paper's finding sentences by hand, as data:
``nest_experiments/studies/<study>/sentences.toml`` (:data:`SENTENCES_FILE`), one ``[[sentences]]`` table per
finding:

- ``where``: the section, figure or table the sentence is in ("IV, Fig. 6", "Section X, Fig. 19c");
- ``quote``: the paper's words, verbatim;
- ``claims``: the ids of the declared claims (:attr:`.studies.Study.paper_claims`) that test it, and/or
- ``reason``: why it is not tested here, starting with :data:`NOT_TESTABLE` (this design cannot test it: it
  needs YouTube's CDN, a browser's internal error log, a quantity no session records ...) or
  :data:`NOT_DECLARED` (testable, but no claim is declared for it, and why);
- ``note`` (optional): how the claims translate the sentence (its condition, the reading of a vague word).

:func:`problems` lists what breaks the map's rules (a declared claim no sentence quotes, a sentence with neither
a claim nor a reason, an id no claim has, a reason without its prefix); :func:`render` writes the map as
``docs/claims/<study>.md`` (``python -m nest_experiments claims map``, which ``--check`` only compares), generated
from the sentences and the declarations together, so a changed declaration changes the map.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from nest_experiments.analysis.claims import Claim, judged_text
from nest_experiments.errors import ConfigError

SENTENCES_FILE = "sentences.toml"
NOT_TESTABLE = "not testable here:"
NOT_DECLARED = "not declared:"
KEYS = ("where", "quote", "claims", "reason", "note")


@dataclass(frozen=True, kw_only=True)
class Sentence:
    """One finding of a paper (the module docstring)."""

    where: str
    quote: str
    claims: tuple[str, ...] = ()
    reason: str = ""
    note: str = ""

    @property
    def status(self) -> str:
        """``declared`` (a claim tests it, maybe in part), ``not testable`` or ``not declared``."""
        if self.claims:
            return "declared"
        return "not testable" if self.reason.startswith(NOT_TESTABLE) else "not declared"


@dataclass(frozen=True, kw_only=True)
class PaperSentences:
    paper: str  # the paper's short name (docs/papers.md)
    sentences: tuple[Sentence, ...]


def sentences_path(study_name: str) -> Any:
    """The study's sentences file, inside its package (a Traversable)."""
    return resources.files(f"nest_experiments.studies.{study_name}") / SENTENCES_FILE


def has_sentences(study_name: str) -> bool:
    try:
        return bool(sentences_path(study_name).is_file())
    except ModuleNotFoundError:
        return False


def load(study_name: str) -> PaperSentences:
    """The study's sentences (:data:`SENTENCES_FILE`); a malformed entry is a one-line error naming it."""
    path = sentences_path(study_name)
    where = f"studies/{study_name}/{SENTENCES_FILE}"
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(where, f"not TOML: {exc}") from None
    return parse(doc, where)


def parse(doc: Mapping[str, Any], where: str = SENTENCES_FILE) -> PaperSentences:
    paper = doc.get("paper")
    if not isinstance(paper, str) or not paper:
        raise ConfigError(f"{where}.paper", "the paper's short name (docs/papers.md), e.g. paper = \"Naik\"")
    tables = doc.get("sentences")
    if not isinstance(tables, list) or not tables:
        raise ConfigError(f"{where}.sentences", "a list of [[sentences]] tables (where, quote, claims / reason)")
    out = []
    for i, t in enumerate(tables):
        key = f"{where}.sentences[{i}]"
        if not isinstance(t, dict):
            raise ConfigError(key, "expected a table")
        unknown = sorted(set(t) - set(KEYS))
        if unknown:
            raise ConfigError(f"{key}.{unknown[0]}", f"unknown key; the keys are {', '.join(KEYS)}")
        for name in ("where", "quote"):
            if not isinstance(t.get(name), str) or not t[name].strip():
                raise ConfigError(f"{key}.{name}", "a non-empty string")
        claims = t.get("claims", [])
        if not isinstance(claims, list) or not all(isinstance(c, str) and c for c in claims):
            raise ConfigError(f"{key}.claims", "a list of claim ids, e.g. [\"video_switches\"]")
        for name in ("reason", "note"):
            if not isinstance(t.get(name, ""), str):
                raise ConfigError(f"{key}.{name}", "a string")
        out.append(Sentence(where=t["where"].strip(), quote=" ".join(t["quote"].split()), claims=tuple(claims),
                            reason=" ".join(t.get("reason", "").split()), note=" ".join(t.get("note", "").split())))
    return PaperSentences(paper=paper, sentences=tuple(out))


def problems(sentences: PaperSentences, claims: Sequence[Claim]) -> list[str]:
    """What breaks the map's rules (empty: none)."""
    ids = [c.id for c in claims]
    quoted = {cid for s in sentences.sentences for cid in s.claims}
    out = [f"declared claim {cid} has no quote (no sentence lists it)" for cid in ids if cid not in quoted]
    for i, s in enumerate(sentences.sentences):
        label = f"sentence {i + 1} ({s.where}: {s.quote[:50]}...)"
        if not s.claims and not s.reason:
            out.append(f"{label}: neither a claim nor a reason")
        if s.reason and not s.reason.startswith((NOT_TESTABLE, NOT_DECLARED)):
            out.append(f"{label}: its reason must start with {NOT_TESTABLE!r} or {NOT_DECLARED!r}")
        out += [f"{label}: no declared claim has the id {cid}" for cid in s.claims if cid not in ids]
    quotes = [s.quote for s in sentences.sentences]
    out += [f"quoted twice: {q[:60]}..." for q in dict.fromkeys(q for q in quotes if quotes.count(q) > 1)]
    return out


def counts(sentences: PaperSentences) -> dict[str, int]:
    """Sentences per status (declared / not testable / not declared), and all."""
    statuses = [s.status for s in sentences.sentences]
    return {"statements": len(statuses), **{k: statuses.count(k) for k in ("declared", "not testable",
                                                                           "not declared")}}


# ---------------------------------------------------------------- the map, as Markdown


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def claim_summary(c: Claim) -> str:
    """One line of what the claim judges: metric, arms, form, expectation, margin and its source, post hoc."""
    text = f"`{c.id}`: {judged_text(c)}"
    if c.margin is not None:
        margin = f"{c.margin:.0%} of b" if c.margin_relative else f"{c.margin:g}"
        text += f" (margin {margin}; {c.margin_source or 'source unstated'})"
    if c.conditions:
        text += "; under " + ", ".join(f"{k}={v}" for k, v in c.conditions.items())
    if c.post_hoc:
        text += f"; **post hoc**: {c.post_hoc}"
    return text


def render(study_name: str, paper: str, sentences: PaperSentences, claims: Sequence[Claim]) -> str:
    """``docs/claims/<study>.md`` (deterministic)."""
    n = counts(sentences)
    lines = [f"# Claim map: {paper}", "",
             f"Generated by `python -m nest_experiments claims map` from `nest_experiments/studies/{study_name}/"
             f"{SENTENCES_FILE}` (the paper's finding sentences, kept by hand) and the study's declared claims "
             f"(`nest_experiments/studies/{study_name}/claims.py`); `tests/unit/test_claim_maps.py` fails when it "
             "is stale, when a declared claim has no quote, or when a quote has neither a claim nor a reason. Do "
             "not edit.", "",
             f"{n['statements']} statements: {n['declared']} tested by declared claims, {n['not testable']} not "
             f"testable here, {n['not declared']} testable but not declared; {len(claims)} claims declared.", "",
             "## The paper's statements", "",
             "| # | where | the paper's words | tested by | how, or why not |", "|---|---|---|---|---|"]
    for i, s in enumerate(sentences.sentences, 1):
        tested = "<br>".join(f"`{cid}`" for cid in s.claims) or "—"
        why = "; ".join(x for x in (s.note, s.reason) if x) or "—"
        lines.append(f"| {i} | {_cell(s.where)} | {_cell(s.quote)} | {tested} | {_cell(why)} |")
    lines += ["", "## The declared claims", "",
              "| claim | judges | its statement | figure | statements quoted (#) |", "|---|---|---|---|---|"]
    for c in claims:
        quoted = ", ".join(str(i) for i, s in enumerate(sentences.sentences, 1) if c.id in s.claims) or "—"
        lines.append(f"| `{c.id}` | {_cell(claim_summary(c))} | {_cell(c.statement)} | {_cell(c.figure)} | "
                     f"{quoted} |")
    lines += ["", "Expectations: `a > b`, `a < b` (directional; with a margin, also contradicted when the CI lies "
              "below it), `|a - b| < margin` (equivalence: agrees only with the CI inside the margin)."]
    return "\n".join(lines) + "\n"


def write_maps(out: Path, studies: Mapping[str, tuple[str, Sequence[Claim]]], *, check: bool = False) -> list[Path]:
    """Write (or, with ``check``, compare) ``out/<study>.md`` for each study name -> (paper, claims); returns the
    files that changed (or are stale)."""
    changed = []
    for name, (paper, claims) in studies.items():
        text = render(name, paper, load(name), claims)
        path = out / f"{name}.md"
        if not path.is_file() or path.read_text() != text:
            changed.append(path)
            if not check:
                out.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    return changed
