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


def test_the_readme_cites_only_documents_that_ship() -> None:
    readme = (ROOT / "README.md").read_text()
    cited = set(re.findall(r"`((?:docs|bench|experiments|examples)/[\w./-]+\.(?:md|py|toml))`", readme))
    assert "docs/design.md" in cited and "docs/papers.md" in cited
    missing = sorted(c for c in cited if not (ROOT / c).is_file())
    assert not missing, f"the README cites files that are not in the repository: {missing}"


def test_design_sections_the_code_cites_exist() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    headings = set(re.findall(r"^## (\d+b?)\.", design, flags=re.M))
    cited = set()
    for path in tracked_text_files():
        cited.update(re.findall(r"DESIGN §(\d+b?)", path.read_text(errors="replace")))
    assert cited, "nothing cites DESIGN §N: the check would be empty"
    assert cited <= headings, f"DESIGN sections cited but absent from docs/design.md: {sorted(cited - headings)}"
