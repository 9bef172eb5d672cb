"""The one lookup of the tool's files (nest_experiments.resources): in this clone, and as an installed wheel sees it
(its ``_data`` folder present; tests/integration/test_wheel.py installs a real wheel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nest_experiments import resources
from nest_experiments.config import qdiscs, topology
from nest_experiments.dash import players
from nest_experiments.dash.content import media
from nest_experiments.errors import ConfigError


def test_in_a_clone_the_data_is_the_clone_s_own_folders() -> None:
    assert not resources.installed()
    assert resources.data_root() == resources.CLONE
    assert (resources.data(resources.TOPOLOGIES) / "dumbbell.toml").is_file()
    assert resources.results_root() == resources.CLONE / "results"


def test_every_shipped_path_exists_in_the_clone() -> None:
    assert [rel for rel in resources.SHIPPED if not (resources.CLONE / rel).exists()] == []


@pytest.mark.parametrize("read", [qdiscs.QDISC_FILE, topology.TOPOLOGY_DIR, media.LADDER_DIR, players.PAGE_SOURCE,
                                  players.DASHJS_FILE, players.DASHJS_DIR / "package.json"])
def test_what_the_code_reads_is_in_what_a_wheel_ships(read: Path) -> None:
    """A file the tool reads at run time lies under one of SHIPPED (or SHIPPED_IF_PRESENT): a wheel has it."""
    rel = read.relative_to(resources.data_root()).as_posix()
    shipped = (*resources.SHIPPED, *resources.SHIPPED_IF_PRESENT)
    assert any(rel == s or rel.startswith(f"{s}/") for s in shipped), rel


def test_installed_the_data_is_the_package_s_copy_and_writes_go_to_cwd_and_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    packaged = tmp_path / "site" / "nest_experiments" / "_data"
    (packaged / "experiments").mkdir(parents=True)
    (packaged / "experiments" / "tiny.toml").write_text("")
    monkeypatch.setattr(resources, "PACKAGED", packaged)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(resources.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resources.installed() and resources.data_root() == packaged
    assert resources.results_root() == tmp_path / "results"
    assert resources.cache_dir("vm") == tmp_path / "xdg" / "nest_experiments" / "vm"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resources.cache_dir("media") == tmp_path / "home" / ".cache" / "nest_experiments" / "media"
    assert resources.experiment_file(Path("tiny")) == packaged / "experiments" / "tiny.toml"


def test_the_cache_variable_wins_in_a_clone_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(resources.CACHE_ENV, raising=False)
    assert resources.cache_dir("media") == resources.CLONE / "media" / "cache"
    assert resources.cache_dir("vm") == resources.CLONE / ".cache" / "vm"
    monkeypatch.setenv(resources.CACHE_ENV, str(tmp_path))
    assert resources.cache_dir("tasks") == tmp_path / "tasks"


def test_run_finds_a_shipped_experiment_by_name_from_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    shipped = resources.CLONE / "experiments" / "pie_dumbbell.toml"
    assert resources.experiment_file(Path("pie_dumbbell")) == shipped
    assert resources.experiment_file(Path("experiments/pie_dumbbell.toml")) == shipped
    (tmp_path / "pie_dumbbell.toml").write_text("")  # a file of the user's wins over the shipped one
    assert resources.experiment_file(Path("pie_dumbbell.toml")) == Path("pie_dumbbell.toml")
    with pytest.raises(ConfigError, match=r"^nope: no such experiment file; the shipped experiments, by name: "
                                          r"abr_quic_tcp, .*pie_dumbbell"):
        resources.experiment_file(Path("nope"))
    with pytest.raises(ConfigError, match="no such experiment file"):
        resources.experiment_file(Path("other/pie_dumbbell.toml"))  # a path with a folder is only a path


def test_a_package_with_neither_data_nor_clone_says_how_to_install(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resources, "CLONE", tmp_path)
    with pytest.raises(Exception, match=r"has neither its data .* install it from a wheel built in a clone"):
        resources.data_root()
