"""Request targets map to files under the served root and nowhere else."""

from __future__ import annotations

from pathlib import Path

import pytest

from nest_experiments.dash.origin.server import resolve


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "site" / "video").mkdir(parents=True)
    (tmp_path / "site" / "manifest.mpd").write_text("<MPD/>")
    (tmp_path / "site" / "video" / "seg 1.m4s").write_bytes(b"x" * 10)
    (tmp_path / "secret.txt").write_text("no")
    (tmp_path / "site" / "link").symlink_to(tmp_path / "secret.txt")
    return tmp_path / "site"


def test_files_resolve_with_size_and_type(root: Path) -> None:
    res = resolve(root, "/manifest.mpd?t=1")
    assert (res.status, res.size, res.content_type) == (200, 6, "application/dash+xml")
    seg = resolve(root, "/video/seg%201.m4s")
    assert (seg.status, seg.size, seg.content_type) == (200, 10, "video/mp4")


@pytest.mark.parametrize("target", ["/../secret.txt", "/%2e%2e/secret.txt", "/link", "/video", "/", "/missing"])
def test_no_escape_no_directories_no_missing(root: Path, target: str) -> None:
    res = resolve(root, target)
    assert (res.status, res.path) == (404, None)
