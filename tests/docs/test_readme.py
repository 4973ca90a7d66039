"""The README stays a short front page whose commands are the ones that work: CI (.ci/run) runs
exactly the test command the README gives, and the first command is the fresh-machine install
and demo."""

from __future__ import annotations

from tests.docs.helpers import ROOT, code_blocks

README = ROOT / "README.md"


def _bash_commands() -> list[str]:
    return [line.strip() for _, body in code_blocks(README, "bash") for line in body.splitlines() if line.strip()]


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 150


def test_first_command_installs_and_runs_the_demo():
    assert _bash_commands()[0] == "pip install -e '.[test]' && icerouter demo"


def test_ci_runs_the_readme_s_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    marker = ci.index("# README: the test command")
    command = next(line.strip() for line in ci[marker + 1:] if line.strip() and not line.startswith("#"))
    assert command in _bash_commands(), f".ci/run runs {command!r}, which the README does not give"
    assert command == "python3 -m pytest"
