"""What the command line asks of the library, typed: ``cli.py`` parses its arguments into these frozen records
and nothing past it sees an ``argparse.Namespace``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """``run`` (:func:`nest_experiments.runs.launch.run_command`): which runs, where, and what after them."""

    experiment: Path | None = None  # the experiment file (a shipped name already resolved); None: the built-in one
    runtime: str | None = None  # "auto", "host", "router", "vm"; None: the file's
    reps: int | None = None  # repetitions per sweep point (overrides the file)
    paper: bool = False  # the file's [paper] table applied
    overrides: tuple[str, ...] = ()  # --set KEY=VALUE, in order
    results: Path | None = None  # the results folder; None: resources.results_root()
    only: tuple[str, ...] = ()  # run names (EXPERIMENT/RUN or RUN); empty: every run
    check: bool = False  # validate and list the runs, create nothing
    plot: bool = True  # plot (and write the report) after the sweep
    until_decided: bool = False  # block after block until the study's claims are decided
    budget: str | None = None  # with until_decided: wall time for the runs ("3h")
    max_reps: int | None = None  # with until_decided: at most this many blocks
    continue_from: Path | None = None  # with until_decided: a committed evidence folder to go on from
    cluster: str | None = None  # a Dask scheduler's address or local:N
    in_block: bool = False  # one block of until_decided's (set by the library, never by the command line)
