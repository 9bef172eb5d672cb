"""Every command in the README's code blocks runs (issue 54): a newcomer copies them first.

``python -m nest_experiments run ...`` runs with ``--check`` (it loads the files and checks this machine's tools,
then lists the runs: no namespace, no VM), ``evidence --readme`` and ``claims map`` with their ``--check``, every
other subcommand parses its arguments and answers ``--help``; a ``./setup.sh ...`` command names a subcommand of
setup.sh's usage line (setup.sh itself is never run here). A command this test cannot check fails it: a README
command must be one of these kinds, written out in full (no placeholders).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from nest_experiments.cli import _parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SETUP = ROOT / "setup.sh"
FENCE = re.compile(r"^```(\S*)\s*$")
LOOKS_LIKE_A_COMMAND = re.compile(r"^\s*(sudo |\./setup\.sh|\.venv/|python3? )")
PYTHONS = (".venv/bin/python", "python", "python3")
TIMEOUT_S = 180


@dataclass(frozen=True)
class Block:
    language: str
    line: int  # of the opening fence, 1-based
    lines: tuple[str, ...]


def code_blocks(text: str) -> list[Block]:
    blocks, current, start, language = [], None, 0, ""
    for n, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if current is None and fence:
            current, start, language = [], n, fence.group(1)
        elif current is not None and line.strip() == "```":
            blocks.append(Block(language=language, line=start, lines=tuple(current)))
            current = None
        elif current is not None:
            current.append(line)
    assert current is None, f"README.md:{start}: a code block is not closed"
    return blocks


def commands(text: str) -> list[str]:
    """Every command line of the README's ``sh`` blocks, its comment left out (a backslash continues a line; ``#``
    starts a comment)."""
    found: list[str] = []
    for block in code_blocks(text):
        if block.language != "sh":
            continue
        joined = "\n".join(block.lines).replace("\\\n", " ")
        found += [shlex.join(argv) for argv in map(lambda line: shlex.split(line, comments=True), joined.splitlines())
                  if argv]
    return found


README_COMMANDS = commands(README.read_text())


def setup_subcommands() -> dict[str, str]:
    """setup.sh's usage line, ``usage: sudo ./setup.sh [run [ARGS] | test [ARGS] | tests SUITE... [...]]``:
    {subcommand: its alternative}, '' for the bare form (the brackets make the subcommand optional)."""
    usage = re.search(r'usage: sudo \./setup\.sh \[(.+)\]" >&2', SETUP.read_text())
    assert usage, "setup.sh has no usage line of the form 'usage: sudo ./setup.sh [A | B | ...]'"
    alternatives = [a.strip() for a in usage.group(1).split(" | ")]
    return {"": "(set up only)", **{a.split()[0]: a for a in alternatives}}


def setup_suites() -> set[str]:
    """The suites ``./setup.sh tests SUITE...`` knows (run_suite's case)."""
    body = SETUP.read_text().split("run_suite() {", 1)[1].split("\n}", 1)[0]
    return set(re.findall(r"^\s*(\w+)\) ", body, flags=re.M))


def check_setup(argv: list[str]) -> None:
    subcommands = setup_subcommands()
    sub = argv[1] if len(argv) > 1 else ""
    assert sub in subcommands, f"./setup.sh {sub}: not in setup.sh's usage ({', '.join(map(repr, subcommands))})"
    script = SETUP.read_text()
    branch = {"": r'^\s*""\)', "tests": r'^if \[ "\$\{1:-\}" = tests \]'}.get(sub, rf"^\s*{re.escape(sub)}\)")
    assert re.search(branch, script, flags=re.M), f"./setup.sh {sub}: in the usage line, but setup.sh has no branch"
    if sub == "tests":
        args = argv[2:]
        suites = args[:args.index("--")] if "--" in args else args
        assert suites and set(suites) <= setup_suites(), f"./setup.sh tests {suites}: suites are {setup_suites()}"


def run_python(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, check=False)


def checked_form(argv: list[str]) -> list[str]:
    """The arguments after ``python -m nest_experiments`` that check the command without doing it."""
    sub = argv[0]
    if sub == "run" or (sub == "evidence" and "--readme" in argv) or argv[:2] == ["claims", "map"]:
        return argv if "--check" in argv else [*argv, "--check"]
    return [sub, "--help"]


def check_python(argv: list[str], command: str) -> None:
    assert argv[1:2] == ["-m"] and len(argv) > 2, f"{command}: a Python command the test cannot check"
    module, rest = argv[2], argv[3:]
    if module != "nest_experiments":
        assert module.startswith("nest_experiments."), f"{command}: not this project's module"
        done = run_python(["-m", module, "--help"])
        assert done.returncode == 0, f"{command}: --help exited {done.returncode}: {done.stderr.strip()}"
        return
    assert rest, f"{command}: no subcommand"
    try:
        _parser().parse_args(rest)  # every option the README gives exists and parses
    except SystemExit as exc:
        pytest.fail(f"{command}: its arguments do not parse (exit {exc.code})")
    checked = checked_form(rest)
    assert "--check" in checked or checked[-1] == "--help"
    done = run_python(["-m", "nest_experiments", *checked])
    shown = f"python -m nest_experiments {shlex.join(checked)}"
    assert done.returncode == 0, f"{command}: `{shown}` exited {done.returncode}: {done.stderr.strip()[-500:]}"
    if rest[0] == "run":  # --check lists the runs, EXPERIMENT/RUN a line
        listed = [line for line in done.stdout.splitlines() if re.fullmatch(r"[\w.-]+/[\w.-]+", line)]
        assert listed, f"{command}: `{shown}` listed no run: {done.stdout[-300:]!r}"


def test_the_readme_has_the_two_commands_and_the_test_command() -> None:
    assert "sudo ./setup.sh" in README_COMMANDS
    assert "sudo ./setup.sh test" in README_COMMANDS
    assert any(c.startswith("sudo .venv/bin/python -m nest_experiments run") for c in README_COMMANDS)
    assert len(README_COMMANDS) >= 10, README_COMMANDS  # the studies' commands too


def test_every_code_block_names_its_language_and_commands_are_in_sh_blocks() -> None:
    for block in code_blocks(README.read_text()):
        assert block.language, f"README.md:{block.line}: a code block without a language (sh for commands)"
        if block.language != "sh":
            stray = [line for line in block.lines if LOOKS_LIKE_A_COMMAND.match(line)]
            assert not stray, f"README.md:{block.line}: commands in a {block.language!r} block: {stray}"


@pytest.mark.parametrize("command", README_COMMANDS)
def test_the_readme_command_runs(command: str) -> None:
    argv = shlex.split(command, comments=True)
    if argv[:1] == ["sudo"]:
        argv = argv[1:]
    assert argv, f"{command!r}: empty"
    if argv[0] == "./setup.sh":
        check_setup(argv)
    elif argv[0] in PYTHONS:
        check_python(argv, command)
    else:
        pytest.fail(f"{command}: a command this test cannot check (setup.sh or python -m nest_experiments only)")


def test_the_checker_refuses_what_it_cannot_check() -> None:
    with pytest.raises(AssertionError, match="not in setup.sh's usage"):
        check_setup(["./setup.sh", "deploy"])
    with pytest.raises(AssertionError, match="suites are"):
        check_setup(["./setup.sh", "tests", "everything"])
    with pytest.raises(AssertionError, match="cannot check"):
        check_python([".venv/bin/python", "bench/phase_split.py"], "python bench/phase_split.py")
    with pytest.raises(pytest.fail.Exception, match="do not parse"):
        check_python([".venv/bin/python", "-m", "nest_experiments", "run", "--no-such-option"], "run --no-such")
    found = commands("```sh\nsudo a \\\n  --b   # c\n# d\n```\n```text\nsudo x\n```\n")
    assert found == ["sudo a --b"]
