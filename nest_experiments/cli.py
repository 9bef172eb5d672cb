"""Command line: ``run``, ``doctor``, ``plot``, ``evidence``, ``claims``, ``media``, ``clean``.

Thin: parse arguments, call the library, catch :class:`NestExpError` once
and print it as one line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from nest_experiments.errors import ConfigError, Interrupted, NestExpError

if TYPE_CHECKING:
    from nest_experiments.runs.request import RunRequest


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m nest_experiments",
                                description="Namespace emulation for DASH QoE research (TCP, MPTCP, QUIC, AQM).")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run an experiment (default: the built-in one)")
    run.add_argument("experiment", nargs="?", type=Path,
                     help="experiment TOML file, or a shipped experiment's name (e.g. pie_dumbbell)")
    run.add_argument("--runtime", choices=("auto", "host", "router", "vm"), help="where to run (default: the file's, else auto)")
    run.add_argument("--reps", type=int, help="repetitions per sweep point (overrides the file)")
    run.add_argument("--paper", action="store_true",
                     help="the paper's full sweep: apply the experiment file's [paper] table (e.g. 25 repetitions)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a key, e.g. --set experiment.duration=30s (repeatable)")
    run.add_argument("--results", type=Path,
                     help="results folder (default: results/ in a clone, ./results when installed)")
    run.add_argument("--only", action="append", default=[], metavar="RUN", help="run only these run names")
    run.add_argument("--check", action="store_true", help="validate and list the runs, create nothing")
    run.add_argument("--no-plot", action="store_true", help="do not plot after the sweep")
    run.add_argument("--until-decided", action="store_true",
                     help="run block after block until the study's claims are decided (or --budget / --max-reps)")
    run.add_argument("--budget", metavar="TIME", help="with --until-decided: wall time for the runs, e.g. 3h, 90min")
    run.add_argument("--max-reps", type=int, metavar="N", help="with --until-decided: at most N blocks (default 25)")
    run.add_argument("--continue-from", type=Path, metavar="EVIDENCE",
                     help="with --until-decided: go on from a committed evidence folder (evidence/<name>): its "
                          "sessions count, its blocks are not run again")
    run.add_argument("--cluster", metavar="ADDRESS",
                     help="run the sweep's runs as tasks on a Dask cluster: a scheduler's address (tcp://HOST:8786) "
                          "or local:N (N worker processes on this machine, sharing its CPU)")
    doctor = sub.add_parser("doctor", help="what this machine can run, and what is missing")
    doctor.add_argument("--no-vm", action="store_true",
                        help="do not boot a guest to check the VM runtime (where the kernel lacks the AQMs)")
    plot = sub.add_parser("plot", help="plot a run folder, or a whole experiment folder and write its report",
                          description="Per-run PNGs next to each run's files; on an experiment (sweep) folder also "
                                      "the sweep report: <folder>/report/report.md with its figures and summary.csv.")
    plot.add_argument("folder", type=Path)
    plot.add_argument("--no-report", action="store_true", help="only the per-run plots, no sweep report")
    plot.add_argument("--no-run-plots", action="store_true", help="only the sweep report, no per-run plots")
    ev = sub.add_parser("evidence", help="export a sweep into an evidence folder, or regenerate the README's table",
                        description="SWEEP OUT --command C: make OUT the evidence folder of the results sweep SWEEP "
                                    "(sessions, claims, looks, per-run summary, tidy tables, report); `plot OUT` "
                                    "rebuilds it. --readme: write the README's result table from evidence/. "
                                    "--migrate FOLDER: re-export an evidence folder of an older results format. "
                                    "--derive FOLDER: add its study's within-session metrics from its tables.")
    ev.add_argument("sweep", nargs="?", type=Path, help="a results sweep folder, e.g. results/nest_paper")
    ev.add_argument("out", nargs="?", type=Path, help="the evidence folder to write, e.g. evidence/nest_paper")
    ev.add_argument("--command", dest="made_by", metavar="COMMAND", default="",
                    help="the exact command that ran the sweep (recorded in evidence.json and the report)")
    ev.add_argument("--readme", nargs="?", const=Path("README.md"), type=Path, metavar="README",
                    help="write the result table of every evidence folder into README (default README.md; the "
                         "evidence folders beside it, in evidence/)")
    ev.add_argument("--check", action="store_true", help="with --readme: change nothing, exit 1 if it is stale")
    ev.add_argument("--migrate", nargs="+", type=Path, metavar="FOLDER",
                    help="re-export evidence folders of an older results format under today's metric names (their "
                         "verdicts unchanged) and rebuild their claims and report")
    ev.add_argument("--derive", nargs="+", type=Path, metavar="FOLDER",
                    help="add the study's within-session metrics (e.g. the RTT-size correlation of Naik's Fig. 6) "
                         "to evidence folders from their committed tables, and judge their claims again")
    claims = sub.add_parser("claims", help="the papers' claim maps (docs/claims/), or freeze a folder's claims",
                            description="map: write docs/claims/<study>.md from each study's sentences and claims "
                                        "(--check: compare only, exit 1 if stale).")
    claims_sub = claims.add_subparsers(dest="claims_command", required=True)
    cmap = claims_sub.add_parser("map", help="write each paper's claim map into docs/claims/")
    cmap.add_argument("--check", action="store_true", help="change nothing, exit 1 if a map is stale")
    freeze = claims_sub.add_parser("freeze", help="record a folder's claims before its data (pre-registration)",
                                   description="Write FOLDER/preregistration.json: each claim's declaration and its "
                                               "hash, its margin and the margin's source, the claim file's hash; a "
                                               "claim changed after it is marked post hoc in every table. FOLDER: "
                                               "a results sweep folder (before its first block) or an evidence "
                                               "folder.")
    freeze.add_argument("folder", type=Path)
    freeze.add_argument("--date", help="the date to record (default: today)")
    sub.add_parser("clean", help="remove what dead runs left behind (namespaces, processes)")
    task = sub.add_parser("task", help="internal: one run of a cluster sweep (a worker starts it)")
    task.add_argument("spec", help="the run's payload (JSON file, or - for stdin)")
    task.add_argument("--out", type=Path, help="run into this folder (inside the VM) instead of writing a tar")
    task.add_argument("--run", help="the run's name (shown by ps; the payload names it)")
    blocks = sub.add_parser("serve-blocks", help="internal: in the VM's guest, run --until-decided's blocks as the "
                                                 "host hands them over (runs.blocks_in_vm)")
    blocks.add_argument("inbox", type=Path, help="the folder the host writes block commands into")
    try:
        from nest_experiments.dash.content.cli import add_media_parser
    except ImportError:
        pass
    else:
        add_media_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(_dispatch(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Interrupted as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        return 143
    except NestExpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        from nest_experiments.runs.launch import run_command

        return run_command(_run_request(args))
    if args.command == "doctor":
        from nest_experiments.runs.doctor import doctor

        return doctor(probe_vm=not args.no_vm)
    if args.command == "plot":
        from nest_experiments.reports.plot import plot_folder

        for path in plot_folder(args.folder, report=not args.no_report, run_plots=not args.no_run_plots):
            print(path)
        return 0
    if args.command == "evidence":
        return _evidence(args)
    if args.command == "claims":
        return _claims(args)
    if args.command == "clean":
        return _clean()
    if args.command == "task":
        from nest_experiments.runs.cluster_task import task_command

        return task_command(args.spec, out=args.out)
    if args.command == "serve-blocks":
        from nest_experiments.runs.blocks_in_vm import run_in_process, serve

        return serve(args.inbox, lambda argv, env: run_in_process(argv, env, main))
    handler = getattr(args, "handler", None)
    if handler is None:
        raise NestExpError(f"unknown command {args.command}")
    return int(handler(args) or 0)


def _run_request(args: argparse.Namespace) -> RunRequest:
    """``run``'s arguments as the library's typed request (a shipped experiment's name resolved to its file)."""
    from nest_experiments.resources import experiment_file
    from nest_experiments.runs.request import RunRequest

    return RunRequest(experiment=experiment_file(args.experiment) if args.experiment is not None else None,
                      runtime=args.runtime, reps=args.reps, paper=args.paper, overrides=tuple(args.set),
                      results=args.results, only=tuple(args.only), check=args.check, plot=not args.no_plot,
                      until_decided=args.until_decided, budget=args.budget, max_reps=args.max_reps,
                      continue_from=args.continue_from, cluster=args.cluster)


def _evidence(args: argparse.Namespace) -> int:
    from nest_experiments.reports import evidence

    if args.migrate:
        from nest_experiments.reports.evidence_migrate import migrate

        for folder in args.migrate:
            written = migrate(folder)
            print(f"{folder}: {'migrated' if written else 'in the current results format already'}")
        return 0
    if args.derive:
        from nest_experiments.reports.evidence_migrate import derive

        for folder in args.derive:
            written = derive(folder)
            print(f"{folder}: {'derived columns added' if written else 'nothing to derive (its columns are there)'}")
        return 0
    if args.readme is not None:
        if args.sweep is not None:
            raise ConfigError("evidence", "--readme takes no sweep folder: give either SWEEP OUT --command or --readme")
        root = args.readme.resolve().parent / "evidence"
        if args.check:
            stale = evidence.current_section(args.readme.read_text()) != evidence.readme_section(root)
            print(f"{args.readme}: the evidence table is {'stale' if stale else 'current'}")
            return 1 if stale else 0
        changed = evidence.update_readme(args.readme, root)
        print(f"{args.readme}: {'updated' if changed else 'unchanged'}")
        return 0
    if args.sweep is None or args.out is None:
        raise ConfigError("evidence", "give SWEEP OUT --command \"...\" (export a sweep) or --readme")
    for path in evidence.export(args.sweep, args.out, command=args.made_by):
        print(path)
    return 0


def _claims(args: argparse.Namespace) -> int:
    from nest_experiments.reports import claimmap
    from nest_experiments.resources import claim_maps_dir
    from nest_experiments.studies import STUDIES

    if args.claims_command == "freeze":
        return _freeze(args.folder, args.date)
    studies = {s.name: (s.paper or s.name, s.paper_claims) for s in STUDIES.values()
               if s.paper_claims and claimmap.has_sentences(s.name)}
    out = claim_maps_dir()
    for name, (_, claims) in studies.items():
        broken = claimmap.problems(claimmap.load(name), claims)
        if broken:
            raise ConfigError(f"studies/{name}/{claimmap.SENTENCES_FILE}", broken[0] +
                              (f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""))
    changed = claimmap.write_maps(out, studies, check=args.check)
    for path in changed:
        print(f"{path}: {'stale' if args.check else 'written'}")
    if not changed:
        print(f"{out}: {len(studies)} claim maps current")
    return 1 if args.check and changed else 0


def _freeze(folder: Path, date: str | None) -> int:
    from nest_experiments.analysis import preregistration
    from nest_experiments.reports import evidence
    from nest_experiments.studies import STUDIES, experiment_name, study_for

    if evidence.is_evidence(folder):
        manifest = evidence.read_manifest(folder)
        study, experiment = STUDIES[manifest.study], manifest.experiment
    else:
        study, experiment = study_for(folder), experiment_name(folder)
    claims = study.claims_for(experiment)
    if not claims:
        raise ConfigError("claims freeze", f"{folder}: its experiment {experiment!r} has no claims to freeze (a "
                          "sweep folder is named after its experiment, e.g. results/abr_quic_tcp)")
    path, before = preregistration.freeze_now(folder, study.name, experiment, claims, date=date)
    when = "before any session" if before else "after its data (post hoc marks: the declarations' own)"
    print(f"{path}: {len(claims)} claims of {study.name}/{experiment} frozen {when}")
    return 0


def _clean() -> int:
    from nest_experiments.net.procs import clean_dead_runs

    _need_root("clean")
    cleaned = clean_dead_runs()
    print(f"cleaned: {', '.join(cleaned)}" if cleaned else "nothing to clean")
    return 0


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise NestExpError(f"'{what}' needs root (network namespaces): run it with sudo")
