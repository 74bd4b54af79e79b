"""Shell completion and the man page, both made from the subcommands' own argparse parsers by
kept libraries: argcomplete (bash, zsh, fish) and argparse-manpage. Nothing here is written by
hand, so a new option completes and is documented as soon as its parser has it."""

from __future__ import annotations

import argparse
from importlib import import_module

from gputop import __version__
from gputop.commands import COMMANDS

SHELLS = ("bash", "zsh", "fish")


def full_parser(top: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`gputop`'s parser `top` with every subcommand added as an argparse subparser (main
    dispatches them itself)."""
    sub = top.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, module in COMMANDS.items():
        parser: argparse.ArgumentParser = import_module(module).build_parser()
        sub.add_parser(name, parents=[parser], add_help=False, help=parser.description,
                       description=parser.description, epilog=parser.epilog)
    return top


def complete(top: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request and exit (argcomplete's protocol)."""
    import argcomplete

    argcomplete.autocomplete(full_parser(top))


def completion_script(shell: str) -> str:
    """The script to source: `eval "$(gputop --completion bash)"`, or save it where the shell
    looks (~/.local/share/bash-completion/completions/gputop, a zsh $fpath directory as _gputop,
    ~/.config/fish/completions/gputop.fish)."""
    from argcomplete.shell_integration import shellcode

    return shellcode(["gputop"], shell=shell)


def manpage(top: argparse.ArgumentParser) -> str:
    """gputop(1) in roff: `gputop --man | man -l -`."""
    from argparse_manpage.manpage import Manpage

    page = Manpage(full_parser(top), _data={
        "project_name": "gputop", "version": __version__, "manual_title": "gputop manual",
        "url": "https://github.com/gputop-ml/gputop",
        "description": "a live terminal GPU monitor for people who train models",
    })
    return str(page)
