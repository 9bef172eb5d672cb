"""Pre-registration: a folder's claims frozen before (or, said so, after) its data, and what came after (pure).

``python -m nest_experiments claims freeze FOLDER`` (:func:`freeze`) writes :data:`FROZEN` into a results sweep
folder before its first block, or into an evidence folder: per claim its whole declaration (arms, conditions,
pairing, expectation, margin, scale ...) and that declaration's hash, its margin with the margin's source (the
paper's words, a stated rule, or none: :attr:`.claims.Claim.margin_source`) and its own post hoc note; the hash of
the study's claim file; the date; and whether the folder held sessions already (``before_data``). ``export``
carries the record into the evidence folder.

:func:`marked` gives each claim judged on a folder the reasons it is *post hoc*, which every table shows beside
it: the claim's own (:attr:`.claims.Claim.post_hoc`: its declaration or margin came after data of its design,
e.g. a margin chosen after five blocks), a declaration that differs from the frozen one, or one the record does
not hold (declared after the freeze); a metric renamed by a results format (issue 54's units,
:func:`current_names`) is not a change. A record frozen after the data (``before_data`` false: the committed
evidence, frozen when this machinery arrived) registers nothing in advance: its marks are the declarations' own.
A record frozen before the data registers each claim it holds unchanged in advance *for that folder*: the claim's
own note (written about the folders judged before it, e.g. "margin stated after an earlier run of the same design")
does not mark it there; the record keeps the note it had at the freeze, for the reader.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from nest_experiments.analysis.claims import Claim
from nest_experiments.errors import NestExpError
from nest_experiments.rundir import write_json

FROZEN = "preregistration.json"
MARGIN_SOURCES = ("paper", "rule")  # Claim.margin_source starts "paper: ..." or "rule: ..."
NOT_DECLARED_FIELDS = ("family", "family_size", "post_hoc")  # set by the study, or the record's own note


def declaration(c: Claim) -> dict[str, Any]:
    """What the claim declares, as JSON (what a change of makes it post hoc)."""
    out: dict[str, Any] = {}
    for f in fields(c):
        if f.name in NOT_DECLARED_FIELDS:
            continue
        out[f.name] = _as_json(getattr(c, f.name))
    return out


def _as_json(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return [_as_json(x) for x in value]
    return value


def declaration_hash(c: Claim) -> str:
    text = json.dumps(declaration(c), sort_keys=True, default=str, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def claims_file_hash(study: str) -> str:
    """The sha256 of ``nest_experiments/studies/<study>/claims.py``; empty for a study declared elsewhere (a
    user's own ``Study``: its claims are recorded one by one all the same)."""
    try:
        path = resources.files(f"nest_experiments.studies.{study}") / "claims.py"
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (ModuleNotFoundError, FileNotFoundError):
        return ""


def margin_source(c: Claim) -> str:
    """``paper``, ``rule`` or ``none``: where the claim's margin comes from (``unstated``: a margin whose source
    the declaration does not say)."""
    if c.margin is None:
        return "none"
    source = c.margin_source.split(":", 1)[0]
    return source if source in MARGIN_SOURCES else "unstated"


def record(study: str, experiment: str, claims: Sequence[Claim], *, date: str, before_data: bool) -> dict[str, Any]:
    return {"date": date, "before_data": before_data, "study": study, "experiment": experiment,
            "claims_file": f"nest_experiments/studies/{study}/claims.py", "claims_file_sha256": claims_file_hash(study),
            "claims": [{"id": c.id, "sha256": declaration_hash(c), "margin": _finite(c.margin),
                        "margin_relative": c.margin_relative, "margin_source": margin_source(c),
                        "margin_why": c.margin_source.split(":", 1)[-1].strip() if c.margin is not None else "",
                        "post_hoc": c.post_hoc, "declaration": declaration(c)} for c in claims]}


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def freeze(folder: Path, study: str, experiment: str, claims: Sequence[Claim], *, date: str,
           before_data: bool) -> Path:
    """Write ``folder``'s :data:`FROZEN`; a folder frozen once stays so (a second freeze is refused)."""
    path = folder / FROZEN
    if path.exists():
        raise NestExpError(f"{path}: the claims of this folder were frozen already (on {read(folder)['date']}); a "
                           "pre-registration is made once: change a claim and its tables mark it post hoc")
    folder.mkdir(parents=True, exist_ok=True)
    write_json(path, record(study, experiment, claims, date=date, before_data=before_data))
    return path


def freeze_now(folder: Path, study: str, experiment: str, claims: Sequence[Claim], *,
               date: str | None = None) -> tuple[Path, bool]:
    """:func:`freeze` dated today (or ``date``), ``before_data`` read off the folder (:func:`has_sessions`);
    returns the record's path and whether it came before the data."""
    import datetime

    before = not has_sessions(folder)
    return freeze(folder, study, experiment, claims, date=date or datetime.date.today().isoformat(),
                  before_data=before), before


def read(folder: Path) -> dict[str, Any]:
    path = folder / FROZEN
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise NestExpError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("claims"), list) or "date" not in doc:
        raise NestExpError(f"{path}: not a pre-registration record (date, before_data, claims)")
    return doc


def marked(folder: Path | None, claims: Sequence[Claim]) -> tuple[Claim, ...]:
    """``claims`` with their post hoc reasons (:attr:`.claims.Claim.post_hoc`) as judged on ``folder``: their own,
    and against ``folder``'s record, when it has one (the module docstring)."""
    doc = read(folder) if folder is not None and (folder / FROZEN).is_file() else None
    frozen = {str(c.get("id")): c for c in (doc or {}).get("claims", [])}
    out = []
    for c in claims:
        reasons = [c.post_hoc] if c.post_hoc else []
        if doc is not None:
            entry = frozen.get(c.id)
            if entry is None:
                reasons.append(f"declared after the freeze of {doc['date']}")
            elif entry.get("sha256") != declaration_hash(c) and (
                    changed := changed_fields(c, current_names(entry.get("declaration") or {}))):
                reasons.append(f"its {', '.join(changed)} changed after the freeze of {doc['date']}")
            elif doc.get("before_data") is True:
                reasons = []  # registered in advance for this folder: its own note is about earlier folders
        out.append(replace(c, post_hoc="; ".join(reasons)))
    return tuple(out)


METRIC_FIELDS = ("metric", "per")  # the declared fields that name a results metric


def current_names(frozen: Mapping[str, Any]) -> dict[str, Any]:
    """A frozen declaration with its metric names in today's results format (``metric_v2`` of
    :mod:`nest_experiments.analysis.results`: a record frozen under format 1 names ``video.avg_bitrate_bps`` what is
    ``video.avg_bitrate_kbps`` now). A rename of the names is no change of the claim: the record keeps its hash (what
    was frozen), and the comparison reads its names as renamed."""
    from nest_experiments.analysis.results import metric_v2

    return {k: metric_v2(v) if k in METRIC_FIELDS and isinstance(v, str) else v for k, v in frozen.items()}


def changed_fields(c: Claim, frozen: Mapping[str, Any]) -> list[str]:
    """The declared fields of ``c`` that differ from the ``frozen`` declaration. A field the record does not hold
    (the evaluator gained it later) counts as frozen at its default: adding a form changes no claim."""
    now = declaration(c)

    def default(key: str) -> Any:
        f = next(f for f in fields(Claim) if f.name == key)
        value = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc,operator]
        return _as_json(value)

    def same(key: str) -> bool:
        was = frozen[key] if key in frozen else default(key)
        return json.dumps(now[key], sort_keys=True, default=str) == json.dumps(was, sort_keys=True, default=str)

    return sorted(k for k in now if not same(k))


def has_sessions(folder: Path) -> bool:
    """Whether ``folder`` holds judged data already: an evidence folder's sessions, or a sweep's completed run."""
    from nest_experiments.analysis.decisions import PRIOR_DIR, PRIOR_SESSIONS
    from nest_experiments.rundir import RunFolder, run_dirs

    if (folder / PRIOR_SESSIONS).is_file() or (folder / PRIOR_DIR / PRIOR_SESSIONS).is_file():
        return True
    return any((RunFolder(d).manifest() or {}).get("status") == "completed" for d in run_dirs(folder))
