"""Where nest_experiments finds its files: the one lookup, for a clone and for an installed package alike.

What the tool reads (:data:`SHIPPED`, paths relative to the data root): ``topologies/``, ``qdisc/``,
``media/ladders/``, ``experiments/``, and dash.js's player page with the pinned dash.js build it loads
(``web/``). In a clone the data root is the clone itself: the top-level folders a user edits. An installed
package (a wheel built from a clone: ``pip wheel .``) carries copies of them in ``nest_experiments/_data/``,
laid out the same way; ``setup.py``'s build step copies :data:`SHIPPED` there. dash.js is copied when it is
installed in the clone (``npm ci`` in ``web/``, which ``sudo ./setup.sh`` runs); a wheel built without it has
no ``player = "dashjs"``, and ``doctor`` says so.

Where the tool writes:

- results: ``results/`` in a clone; installed, ``./results`` in the current directory
  (``run --results FOLDER`` picks any other);
- caches (generated and encoded media, the VM's kernel and initramfs, the folders of cluster tasks):
  ``$NEST_EXP_CACHE`` when set; else in a clone ``media/cache/`` (media) and ``.cache/`` (the rest);
  installed, ``$XDG_CACHE_HOME/nest_experiments`` (``~/.cache/nest_experiments``). Never put it under
  ``/tmp``: the VM's guest sees the host's file system, but not its ``/tmp``.

Native parts (the quic-go fetcher, Caddy) are not data: ``setup.sh`` builds them into the venv's ``bin/``.
"""

from __future__ import annotations

import os
from pathlib import Path

from nest_experiments.errors import ConfigError, NestExpError

PACKAGE = Path(__file__).resolve().parent
PACKAGED = PACKAGE / "_data"  # an installed package's copy of SHIPPED
CLONE = PACKAGE.parent  # the clone, when the package is used from one (an editable install)

TOPOLOGIES = "topologies"
QDISC_KINDS = "qdisc/kinds.toml"
LADDERS = "media/ladders"
EXPERIMENTS = "experiments"
DASHJS_PAGE = "web/dashjs_player.html"
CLAIM_MAPS = "docs/claims"  # the papers' claim maps (a clone's, generated: reports.claimmap)
DASHJS_PACKAGE = "web/node_modules/dashjs"
DASHJS_SCRIPT = f"{DASHJS_PACKAGE}/dist/modern/umd/dash.all.min.js"

#: what a wheel must carry (a folder: every file in it), relative to the data root
SHIPPED = (TOPOLOGIES, "qdisc", LADDERS, EXPERIMENTS, DASHJS_PAGE)
#: shipped when present in the clone (dash.js: only after ``npm ci`` in ``web/``)
SHIPPED_IF_PRESENT = (f"{DASHJS_PACKAGE}/package.json", f"{DASHJS_PACKAGE}/LICENSE.md", DASHJS_SCRIPT)
CACHE_ENV = "NEST_EXP_CACHE"


def installed() -> bool:
    """True for an installed package (a wheel), False for a clone."""
    return PACKAGED.is_dir()


def data_root() -> Path:
    """The folder holding :data:`SHIPPED`: the clone, or the installed package's copy."""
    if installed():
        return PACKAGED
    if not (CLONE / QDISC_KINDS).is_file():
        raise NestExpError(f"nest_experiments in {PACKAGE} has neither its data ({PACKAGED}) nor a clone around it: "
                           "install it from a wheel built in a clone (pip wheel .), or use the clone")
    return CLONE


def data(relative: str) -> Path:
    """A shipped file or folder, e.g. ``data("topologies")``."""
    return data_root() / relative


def results_root() -> Path:
    """Where ``run`` writes unless told (``--results``): ``results/`` in a clone, ``./results`` when installed."""
    return Path.cwd() / "results" if installed() else CLONE / "results"


def cache_dir(name: str) -> Path:
    """A writable cache folder: ``media``, ``vm``, ``tasks`` or ``selectwait`` (the module's docstring says where)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen).resolve() / name
    if installed():
        xdg = os.environ.get("XDG_CACHE_HOME")
        return (Path(xdg) if xdg else Path.home() / ".cache") / "nest_experiments" / name
    return CLONE / "media" / "cache" if name == "media" else CLONE / ".cache" / name


def claim_maps_dir() -> Path:
    """Where ``claims map`` writes the papers' claim maps: ``docs/claims/`` of the clone (an installed package
    has no docs)."""
    if installed():
        raise NestExpError("the claim maps live in a clone's docs/claims/: run `claims map` from a clone")
    return CLONE / CLAIM_MAPS


def experiment_file(given: Path) -> Path:
    """An experiment file as ``run`` is given it: a file that exists (as is), else a shipped experiment by name
    (``pie_dumbbell`` or ``experiments/pie_dumbbell.toml``), so that a clone and an installed package run the
    same names; :class:`ConfigError` lists the shipped ones."""
    if given.is_file():
        return given
    name = given.name if given.suffix == ".toml" else f"{given.name}.toml"
    shipped = data(EXPERIMENTS) / name
    if not given.is_absolute() and given.parent in (Path("."), Path(EXPERIMENTS)) and shipped.is_file():
        return shipped
    raise ConfigError(str(given), "no such experiment file; the shipped experiments, by name: "
                                  + ", ".join(shipped_experiments()))


def shipped_experiments() -> list[str]:
    """The names of the shipped experiment files."""
    return sorted(p.stem for p in data(EXPERIMENTS).glob("*.toml"))
