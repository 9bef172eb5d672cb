"""The project's documents stand on their own in a user's clone: no path outside the repository, and what the
README cites ships with it."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = [ROOT / line for line in out.splitlines()
             if line.endswith((".md", ".py", ".toml", ".sh", ".txt", ".cfg", ".ini", ".html", ".js"))]
    return [f for f in files if f.is_file()]


def test_no_document_or_source_points_outside_the_repository() -> None:
    offenders, needle = [], "../" + "shared"  # split: this file names it too
    for path in tracked_text_files():
        text = path.read_text(errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            if needle in line:
                offenders.append(f"{path.relative_to(ROOT)}:{n}")
    assert not offenders, "paths outside the repository (name the paper, see docs/papers.md): " + ", ".join(offenders)


CITED = r"`((?:docs|bench|experiments|examples)/[\w./-]+\.(?:md|py|toml))`"
READ_ON = "## Where to read on"


def doc_pages() -> list[Path]:
    """Every page under docs/ (the README's reference moved there in issue 54)."""
    return sorted((ROOT / "docs").rglob("*.md"))


def test_the_readme_cites_only_documents_that_ship() -> None:
    readme = (ROOT / "README.md").read_text()
    cited = set(re.findall(CITED, readme))
    assert "docs/design.md" in cited and "docs/papers.md" in cited
    missing = sorted(c for c in cited if not (ROOT / c).is_file())
    assert not missing, f"the README cites files that are not in the repository: {missing}"


def test_the_docs_pages_cite_only_documents_that_ship() -> None:
    # the text that moved out of the README (issue 54) keeps the README's check
    missing = sorted(f"{page.relative_to(ROOT)}: {c}" for page in doc_pages()
                     for c in set(re.findall(CITED, page.read_text())) if not (ROOT / c).is_file())
    assert not missing, f"docs/ pages cite files that are not in the repository: {missing}"


def test_every_docs_page_is_linked_once_from_the_readmes_where_to_read_on() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme.count(READ_ON) == 1, f"the README has no (or more than one) {READ_ON!r} section"
    body, read_on = readme.split(READ_ON)
    assert "\n## " not in read_on, f"{READ_ON!r} must be the README's last section"
    links = re.findall(r"\]\(((?:docs)/[\w./-]+\.md)\)", readme)
    missing = sorted(link for link in links if not (ROOT / link).is_file())
    assert not missing, f"the README links pages that are not in the repository: {missing}"
    in_body = sorted(set(re.findall(r"\]\((docs/[\w./-]+\.md)\)", body)))
    assert not in_body, f"docs pages linked outside {READ_ON!r} (link each once, there): {in_body}"
    counts = {str(page.relative_to(ROOT)): links.count(str(page.relative_to(ROOT))) for page in doc_pages()}
    assert len(counts) >= 10, counts  # the pages the README's reference moved to, the claim maps, design, papers
    wrong = {page: n for page, n in counts.items() if n != 1}
    assert not wrong, f"every docs page linked exactly once from {READ_ON!r} (page: times linked): {wrong}"


def test_design_sections_the_code_cites_exist() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    headings = set(re.findall(r"^## (\d+b?)\.", design, flags=re.M))
    cited = set()
    for path in tracked_text_files():
        cited.update(re.findall(r"DESIGN §(\d+b?)", path.read_text(errors="replace")))
    assert cited, "nothing cites DESIGN §N: the check would be empty"
    assert cited <= headings, f"DESIGN sections cited but absent from docs/design.md: {sorted(cited - headings)}"
