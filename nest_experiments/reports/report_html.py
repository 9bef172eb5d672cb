"""The sweep report as one self-contained HTML file: ``<sweep>/report/report.html``.

``plot`` writes it after ``report.md``, ``claims.csv`` and the study's own
files (:func:`nest_experiments.reports.plot.plot_folder`), from those files
and the run folders alone:

- the sweep report (``report.md``) converted to HTML (Python-Markdown, its
  ``tables`` and ``toc`` extensions; raw HTML in the Markdown is shown as
  text, never interpreted), with its claim table replaced by one built from
  ``claims.csv`` whose verdicts are coloured (agrees / contradicts /
  undecided, and the sessions still needed);
- the run list: per run its status, point, runtime, CPU-saturated 1 s windows
  (the manifest's ``cpu`` record: ``saturated_windows`` and ``saturated_by``
  per rule; older runs: ``cpu_saturated_windows``) and warnings, each run's
  name a link to its section below, a ``<details>`` block with its figures
  (the PNGs in its run folder) and warnings;
- the study's own report files (``Study.outputs``: each ``.md`` converted).

Every figure is inlined as a ``data:image/png;base64`` URI; the style sheet
is embedded; there is no script, no font and no link to anything outside the
file, and a Content-Security-Policy (``default-src 'none'``) keeps a browser
from fetching anything should a figure reference slip through. An image the
Markdown names but that is not a local PNG/SVG file becomes its alt text.
"""

from __future__ import annotations

import base64
import csv
import html
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import markdown
from markdown.extensions import Extension
from markdown.extensions.toc import slugify
from markdown.treeprocessors import Treeprocessor

from nest_experiments.analysis import decisions, sequential
from nest_experiments.analysis import markdown as md
from nest_experiments.analysis.claims import more_text
from nest_experiments.analysis.results import flatten
from nest_experiments.rundir import STALLS_TEXT, read_manifest, run_dirs, write_atomic

REPORT_HTML = "report.html"
CLAIMS_HEADING = "## The paper's claims, judged"
_CLAIMS_SLOT = "NESTEXPCLAIMSTABLESLOT"
# every verdict of analysis.sequential, each its own colour (a decision, an open question, or why nothing was judged)
VERDICT_CLASSES = {sequential.AGREES: "agrees", sequential.CONTRADICTS: "contradicts",
                   sequential.UNDECIDED: "undecided", sequential.TOO_FEW: "toofew",
                   sequential.UNINFORMATIVE: "uninformative", sequential.NO_DATA: "nodata"}
_MIME = {".png": "image/png", ".svg": "image/svg+xml"}

STYLE = """
body { font-family: sans-serif; font-size: 14px; line-height: 1.4; margin: 0 auto; max-width: 1200px;
       padding: 0 1.5em 3em; color: #1a1a1a; background: #fff; }
h1 { border-bottom: 2px solid #444; padding-bottom: .2em; }
h2 { border-bottom: 1px solid #bbb; margin-top: 2em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; height: auto; border: 1px solid #eee; margin: .3em 0; }
code { background: #f4f4f4; padding: 0 .2em; }
nav ul { columns: 2; }
td.agrees { background: #cdeccd !important; color: #0b4d0b; font-weight: bold; }
td.contradicts { background: #f6c9c9 !important; color: #7a0b0b; font-weight: bold; }
td.undecided { background: #fbe7b5 !important; color: #6b4a00; font-weight: bold; }
td.toofew { background: #dbe6f5 !important; color: #1f3d66; }
td.uninformative { background: #e8def3 !important; color: #47306b; }
td.nodata { background: #e4e4e4 !important; color: #444; }
td.other { background: #ffffff !important; }
td.hot { background: #f6c9c9 !important; font-weight: bold; }
details { border: 1px solid #ddd; margin: .4em 0; padding: .3em .6em; }
details > summary { cursor: pointer; font-weight: bold; }
.legend span { padding: .1em .5em; margin-right: .5em; }
.legend span.agrees { background: #cdeccd; }
.legend span.contradicts { background: #f6c9c9; }
.legend span.undecided { background: #fbe7b5; }
.legend span.toofew { background: #dbe6f5; }
.legend span.uninformative { background: #e8def3; }
.legend span.nodata { background: #e4e4e4; }
.missing { color: #7a0b0b; font-style: italic; }
"""


# ---------------------------------------------------------------- Markdown -> HTML


class _InlineImages(Treeprocessor):
    """Every ``<img>`` of a local PNG/SVG (relative to ``base``) becomes a data URI; any other becomes its alt."""

    def __init__(self, md_: markdown.Markdown, base: Path) -> None:
        super().__init__(md_)
        self.base = base

    def run(self, root: ET.Element) -> None:
        for parent in list(root.iter()):
            for i, child in enumerate(list(parent)):
                if child.tag != "img":
                    continue
                uri = data_uri(self.base, child.get("src", ""))
                if uri is not None:
                    child.set("src", uri)
                    continue
                span = ET.Element("span", {"class": "missing"})
                span.text = f"(figure not found: {child.get('src', '')})"
                span.tail = child.tail
                parent.remove(child)
                parent.insert(i, span)


class _Images(Extension):
    def __init__(self, base: Path) -> None:
        super().__init__()
        self.base = base

    def extendMarkdown(self, md_: markdown.Markdown) -> None:  # noqa: N802 (Python-Markdown's name)
        md_.treeprocessors.register(_InlineImages(md_, self.base), "nest_inline_images", 0)


def data_uri(base: Path, src: str) -> str | None:
    """``src`` (a file name relative to ``base``) as a ``data:`` URI; None unless it is a local PNG or SVG file."""
    if not src or ":" in src or src.startswith(("/", "\\")):
        return None
    path = base / src
    mime = _MIME.get(path.suffix.lower())
    if mime is None or not path.is_file():
        return None
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def to_html(text: str, *, base: Path, id_prefix: str, baselevel: int = 1) -> str:
    """Markdown as the project writes it (headings, paragraphs, lists, tables, images) -> HTML; raw HTML stays text."""
    def slug(value: str, separator: str) -> str:
        return id_prefix + slugify(value, separator)

    conv = markdown.Markdown(extensions=["tables", "toc", _Images(base)],
                             extension_configs={"toc": {"slugify": slug, "baselevel": baselevel}})
    conv.preprocessors.deregister("html_block")
    conv.inlinePatterns.deregister("html")
    return conv.convert(text)


# ---------------------------------------------------------------- the claim table


def _num(value: str) -> str:
    try:
        return md.number(float(value))
    except ValueError:
        return value or "—"


def claims_table(rows: Sequence[Mapping[str, str]]) -> str:
    """``claims.csv``'s rows as an HTML table, each verdict cell coloured by its verdict."""
    head = ["claim", "paper", "ours: effect [CI]", "p (alpha)", "n", "verdict", "sessions still needed"]
    legend = "".join(f'<span class="{cls}">{_e(v)}</span>' for v, cls in VERDICT_CLASSES.items())
    out = [f'<p class="legend">Verdicts: {legend}</p>',
           '<table class="claims"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
    for r in rows:
        margin = f" (margin {_num(r.get('margin', ''))})" if r.get("margin") else ""
        claim = f"<b>{_e(r.get('id'))}</b>: {_e(r.get('metric'))}, {_e(r.get('a'))} vs {_e(r.get('b'))}, " \
                f"{_e(r.get('expect'))}{_e(margin)}"
        if r.get("conditions"):
            claim += f"; {_e(r.get('conditions'))}"
        paper = f"{_e(r.get('statement'))} ({_e(r.get('figure'))})" + (
            f": {_e(r.get('paper_value'))}" if r.get("paper_value") else "")
        ci = f" [{_num(r['ci_low'])}, {_num(r['ci_high'])}]" if r.get("ci_low") and r.get("ci_high") else ""
        ours = f"{_num(r.get('effect', ''))}{ci}" + (f" ({_e(r.get('scale'))})" if r.get("scale") else "")
        p = f"{_num(r['p'])} ({_num(r.get('alpha', ''))})" if r.get("p") else "—"
        n = f"{_e(r.get('n_a'))} vs {_e(r.get('n_b'))}" + (f", {_e(r.get('n_pairs'))} pairs" if r.get("n_pairs") else "")
        if r.get("saturated_excluded") not in (None, "", "0"):
            n += f"; {_e(r.get('saturated_excluded'))} CPU-saturated left out"
        verdict = r.get("verdict", "")
        look = f" at look {_e(r['look'])}" if r.get("look") else ""
        note = f"<br><small>{_e(r.get('note'))}</small>" if r.get("note") else ""
        more = _e(more_text(float(r["more_needed"]), r.get("more_unit") or "sessions")) if r.get("more_needed") else "—"
        cls = VERDICT_CLASSES.get(verdict, "other")
        out.append(f"<tr><td>{claim}</td><td>{paper}</td><td>{ours}</td><td>{p}</td><td>{n}</td>"
                   f'<td class="{cls}">{_e(verdict)}{look}{note}</td><td class="{cls}">{more}</td></tr>')
    return "\n".join(out + ["</tbody></table>"])


def read_claims(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _with_claims_slot(text: str) -> tuple[str, bool]:
    """report.md with the Markdown claim table of its claims section replaced by a slot for the coloured one."""
    lines, out, inside, slotted = text.splitlines(), [], False, False
    for line in lines:
        if line.startswith("## "):
            inside = line.strip() == CLAIMS_HEADING
        if inside and line.startswith("|"):
            if not slotted:
                out += [_CLAIMS_SLOT, ""]
                slotted = True
            continue
        out.append(line)
    return "\n".join(out) + "\n", slotted


# ---------------------------------------------------------------- the run list


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def run_anchor(name: str) -> str:
    return "run-" + re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _saturation(m: Mapping[str, Any]) -> tuple[int, str]:
    """Saturated 1 s windows (every rule) and the count per rule (``cpu.saturated_by``), read defensively."""
    try:
        windows = decisions.saturated_windows(m)
    except (TypeError, ValueError):
        windows = 0
    cpu = m.get("cpu")
    by = cpu.get("saturated_by") if isinstance(cpu, Mapping) else None
    rules = ", ".join(f"{k} {v}" for k, v in by.items()) if isinstance(by, Mapping) else ""
    return windows, rules


def _warnings(m: Mapping[str, Any]) -> list[str]:
    w = m.get("warnings")
    return [str(x) for x in w] if isinstance(w, list) else ([str(w)] if w else [])


def run_list(folder: Path, figures: Callable[[Path], Sequence[Path]]) -> str:
    """Every run folder of the sweep: a table (each name links to its section), then a ``<details>`` per run."""
    dirs = run_dirs(folder)
    if not dirs:
        return "<p>No run folders here (an evidence folder keeps the tables, not the runs).</p>"
    head = ["run", "status", "point", "runtime", "CPU-saturated 1 s windows", "by rule", "warnings", "figures"]
    table = ['<table class="runs"><thead><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead><tbody>"]
    sections = []
    for d in dirs:
        m = read_manifest(d) or {}
        status = str(m.get("status", "unknown (no readable manifest.json)"))
        point = flatten(m["point"]) if isinstance(m.get("point"), dict) else {}
        windows, rules = _saturation(m)
        warns, pngs = _warnings(m), list(figures(d))
        anchor = run_anchor(d.name)
        hot = ' class="hot"' if windows else ""
        table.append(f'<tr><td><a href="#{anchor}">{_e(d.name)}</a></td><td>{_e(status)}</td>'
                     f"<td>{_e(short_point(point))}</td>"
                     f"<td>{_e(m.get('runtime', ''))}</td><td{hot}>{windows}</td><td>{_e(rules)}</td>"
                     f"<td>{len(warns)}</td><td>{len(pngs)}</td></tr>")
        body = [f'<div id="{anchor}">']
        if m.get("reason"):
            body.append(f"<p><b>Reason:</b> {_e(m['reason'])}</p>")
        if point:
            body.append("<p><b>Point:</b> " + ", ".join(f"<code>{_e(k)}</code> = {_e(v)}" for k, v in point.items())
                        + "</p>")
        body.append("<ul>" + "".join(f"<li>{_e(w)}</li>" for w in warns) + "</ul>" if warns else
                    "<p>No warnings.</p>")
        for png in pngs:
            uri = data_uri(png.parent, png.name)
            if uri is not None:
                body.append(f'<figure><img src="{uri}" alt="{_e(d.name)}: {_e(png.name)}">'
                            f"<figcaption>{_e(png.name)}</figcaption></figure>")
        if not pngs:
            body.append("<p>No figures for this run.</p>")
        if (d / STALLS_TEXT).exists():  # the timeline's stalls: what the queue and the transport did before each
            lines = (d / STALLS_TEXT).read_text().splitlines()
            body.append("<p><b>Stalls</b> (what the queue and the transport did before each):</p><ul>"
                        + "".join(f"<li>{_e(line)}</li>" for line in lines) + "</ul>")
        sections.append(f"<details><summary>{_e(d.name)} — {_e(status)}, {len(pngs)} figure(s), {len(warns)} "
                        f"warning(s){', CPU-saturated' if windows else ''}</summary>" + "\n".join(body)
                        + "</div></details>")
    return "\n".join([*table, "</tbody></table>", *sections])


def short_point(point: Mapping[str, str]) -> str:
    """``kind=pie, target=5ms`` for a point: each key's last part, a value an axis set on several keys once."""
    return ", ".join(dict.fromkeys(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in point.items()))


def run_pngs(run_dir: Path) -> list[Path]:
    """The figures ``plot`` drew for one run (every PNG in its folder)."""
    return sorted(run_dir.glob("*.png"))


# ---------------------------------------------------------------- the page


def _after_headline(content: str, nav: str) -> str:
    """``nav`` after the title and the paragraph right below it (report.md's first: how many sessions were
    CPU-saturated and what that leaves the claims), so that the page opens with that line too."""
    head = re.search(r"<h1[^>]*>.*?</h1>(\s*<p>.*?</p>)?", content, flags=re.S)
    if head is None:
        return nav + content
    return content[:head.end()] + "\n" + nav + content[head.end():]


def write_report_html(folder: Path, report_dir: Path, *, study_files: Sequence[Path] = (),
                      figures: Callable[[Path], Sequence[Path]] = run_pngs) -> Path:
    """``report_dir/report.html`` from ``report_dir``'s report.md and claims.csv, the run folders of ``folder``
    and the study's files (its ``.md`` files are converted; the rest are inlined where they are figures)."""
    from nest_experiments.reports.report_md import CLAIMS_CSV, REPORT_MD

    report_md = report_dir / REPORT_MD
    text = report_md.read_text() if report_md.exists() else f"# Sweep report: {folder.name}\n\nNo report.md.\n"
    text, slotted = _with_claims_slot(text)
    claims = read_claims(report_dir / CLAIMS_CSV)
    body = to_html(text, base=report_dir, id_prefix="r-")
    if slotted:
        body = body.replace(f"<p>{_CLAIMS_SLOT}</p>", claims_table(claims) if claims else
                            "<p>(claims.csv absent: the table is in report.md)</p>")
    elif claims:
        body += "\n<h2 id=\"r-claims\">The paper's claims, judged</h2>\n" + claims_table(claims)
    parts = [body, '<h2 id="runs">Runs</h2>', "<p>Each run's name opens its figures and warnings below.</p>",
             run_list(folder, figures)]
    study_md = [p for p in study_files if p.suffix == ".md" and p.exists() and p != report_md]
    for i, path in enumerate(study_md):
        parts += [f'<h2 id="study-{i}">Study report: {_e(path.name)}</h2>',
                  to_html(path.read_text(), base=path.parent, id_prefix=f"s{i}-", baselevel=3)]
    content = "\n".join(parts)
    nav = "<nav><ul>" + "".join(f'<li><a href="#{i}">{t}</a></li>'
                                for i, t in re.findall(r'<h2 id="([^"]+)">(.*?)</h2>', content)) + "</ul></nav>"
    content = _after_headline(content, nav)
    page = "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
        "style-src 'unsafe-inline'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>Sweep report: {_e(folder.name)}</title>", f"<style>{STYLE}</style></head><body>",
        content, "</body></html>", ""])
    out = report_dir / REPORT_HTML
    report_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out, page)
    return out
