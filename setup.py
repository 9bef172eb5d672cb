"""The build step that makes a wheel self-contained (everything else is in setup.cfg).

A wheel carries, beside the package, copies of the clone's top-level folders the tool reads at run time
(``topologies/``, ``qdisc/``, ``media/ladders/``, ``experiments/``, dash.js's page and, once ``npm ci`` has run in
``web/``, the pinned dash.js build) in ``nest_experiments/_data/``, as ``nest_experiments.resources.SHIPPED`` lists
them; ``resources`` finds them there when installed, and in the clone when not. An editable install copies nothing:
it reads the clone.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from nest_experiments import resources  # noqa: E402  (stdlib only: safe to import while building)


def _files(source: Path) -> list[Path]:
    if source.is_file():
        return [source]
    return sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and not p.name.startswith("."))


class BuildWithData(build_py):
    """build_py, then the shipped data into ``<build>/nest_experiments/_data/``."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "nest_experiments" / resources.PACKAGED.name
        missing = [rel for rel in resources.SHIPPED if not (HERE / rel).exists()]
        if missing:
            raise SystemExit(f"setup.py: {', '.join(missing)} missing in {HERE}: build the wheel from a whole clone")
        present = [rel for rel in resources.SHIPPED_IF_PRESENT if (HERE / rel).is_file()]
        if len(present) < len(resources.SHIPPED_IF_PRESENT):
            print("setup.py: dash.js is not installed in web/ (npm ci, which sudo ./setup.sh runs): "
                  "this wheel will have no player = \"dashjs\"", file=sys.stderr)
        for rel in (*resources.SHIPPED, *present):
            for src in _files(HERE / rel):
                dest = target / src.relative_to(HERE)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)


setup(cmdclass={"build_py": BuildWithData})
