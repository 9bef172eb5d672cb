"""``python -m nest_experiments.dash.players --apt``: the Debian packages the players need, one line, space-separated
(setup.sh installs them from this list, so that a player's record is the one place its packages are named)."""

from __future__ import annotations

import argparse
import sys

from nest_experiments.dash import players


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nest_experiments.dash.players", description=__doc__)
    parser.add_argument("--apt", action="store_true", required=True, help="print the players' Debian packages")
    parser.parse_args(argv)
    print(" ".join(players.apt_packages()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
