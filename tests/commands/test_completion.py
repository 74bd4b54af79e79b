"""Shell completion and the man page come from the parsers themselves: the bash script, run in a
real bash, completes options, subcommands and choices; the man page renders with `man -l`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.commands import monitor
from gputop.commands.complete import SHELLS, completion_script, manpage

BASH_COMPLETE = r'''
eval "$(gputop --completion bash)"
fn=$(complete -p gputop | sed 's/.* -F \([^ ]*\) .*/\1/')
while IFS= read -r line; do
    COMP_LINE="$line"; COMP_POINT=${#COMP_LINE}
    read -r -a COMP_WORDS <<< "$line"
    [[ "$line" == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMPREPLY=()
    "$fn" gputop "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"
    echo "${COMPREPLY[*]}"
done
'''


@pytest.fixture
def gputop_on_path(tmp_path: Path) -> dict[str, str]:
    """A `gputop` command on PATH that runs this checkout's gputop with this Python."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "gputop"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -m gputop \"$@\"\n")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_options_subcommands_and_choices(gputop_on_path: dict[str, str]) -> None:
    asked = ["gputop --the", "gputop rep", "gputop replay --fol", "gputop --layout ",
             "gputop --completion ", "gputop serve --met"]
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", BASH_COMPLETE],
                       input="\n".join(asked) + "\n", capture_output=True, text=True,
                       timeout=120, env=gputop_on_path)
    assert r.returncode == 0, r.stderr
    answers = [line.split() for line in r.stdout.splitlines()]
    assert answers == [["--theme"], ["replay", "report"], ["--follow"],
                       ["auto", "compact", "cards"], ["bash", "zsh", "fish"], ["--metrics"]]


@pytest.mark.parametrize("shell", SHELLS)
def test_every_shell_gets_a_script_that_names_gputop(shell: str) -> None:
    script = completion_script(shell)
    assert "gputop" in script and "_ARGCOMPLETE" in script
    if shell == "fish":
        assert "complete --command gputop" in script or "complete -c gputop" in script


@pytest.mark.skipif(shutil.which("zsh") is None, reason="no zsh")
def test_the_zsh_script_parses() -> None:
    r = subprocess.run(["zsh", "-n", "-c", completion_script("zsh")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr


@pytest.mark.skipif(shutil.which("fish") is None, reason="no fish")
def test_the_fish_script_parses() -> None:
    r = subprocess.run(["fish", "--no-execute", "-c", completion_script("fish")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_the_man_page_has_every_option_and_subcommand() -> None:
    page = manpage(monitor.build_parser())
    assert page.startswith('.TH GPUTOP "1"')
    for option in ("demo", "record", "theme", "web", "print\\-config"):
        assert f"\\fB\\-\\-{option}\\fR" in page
    for command in ("replay", "report", "import", "plan", "serve", "fleet", "export"):
        assert f"gputop {command}" in page


@pytest.mark.skipif(shutil.which("man") is None, reason="no man")
def test_man_renders_the_page(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "gputop", "--man"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    page = tmp_path / "gputop.1"
    page.write_text(r.stdout)
    shown = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "MANPAGER": "cat", "PAGER": "cat",
                                            "MANWIDTH": "100"})
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "gputop - a live terminal GPU monitor for people who train models" in text
    assert "--print-config" in text and "gputop replay" in text and "--follow" in text
