"""Argument types shared by the subcommands' parsers: each turns a command-line word into a value
or says in one line what is wrong with it (argparse prints it and exits with status 2)."""

from __future__ import annotations

import argparse

from gputop.commands.web import DEFAULT_WEB


def positive(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {s!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return v


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return v


def size(s: str) -> int:
    """Bytes from 500M, 2G, 1.5G, 64k or 1000000 (k, M, G, T are powers of 1024)."""
    text = s.strip().lower().removesuffix("b").removesuffix("i")
    unit = 1
    if text and text[-1] in "kmgt":
        unit = 1 << (10 * ("kmgt".index(text[-1]) + 1))
        text = text[:-1]
    try:
        v = int(float(text) * unit)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not a size: {s!r} (e.g. 500M or 2G)") from None
    if v <= 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return v


def device_list(s: str) -> set[int]:
    out: set[int] = set()
    try:
        for part in s.split(","):
            lo, _, hi = part.strip().partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of GPU indexes: {s!r}") from None
    return out


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` (every interface), `PORT` (loopback), `[::1]:PORT`."""
    # Here, not at the top: the other commands must not load the exporter (prometheus_client).
    from gputop.export.server import DEFAULT_ADDRESS

    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = DEFAULT_ADDRESS[0], text
    elif not host:
        host = "0.0.0.0"
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {text!r}") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"no such port: {number}")
    return host, number


def add_display_args(p: argparse.ArgumentParser, what: str) -> None:
    """The options of every dashboard (the monitor, replay, fleet): colours, mouse, browser."""
    p.add_argument("--theme", metavar="NAME",
                   help="colours: dark, light (for a light terminal), or any Textual theme by "
                        "name (nord, solarized-light, ansi-light, ...)")
    p.add_argument("--no-mouse", action="store_true", help="do not capture the mouse")
    p.add_argument("--mouse", action="store_false", dest="no_mouse",
                   help="capture the mouse (the default, unless the config file says not)")
    p.add_argument("--ansi", action=argparse.BooleanOptionalAction, default=False,
                   help="use the terminal's 16 ANSI colours")
    p.add_argument("--web", nargs="?", const="", default=None, metavar="HOST:PORT",
                   help=f"show {what} in a browser instead: serve it on HOST:PORT (default "
                        f"{DEFAULT_WEB[0]}:{DEFAULT_WEB[1]}, loopback; each tab runs its own)")


def web_address(parser: argparse.ArgumentParser, text: str) -> tuple[str, int]:
    if not text:
        return DEFAULT_WEB
    try:
        return parse_address(text)
    except argparse.ArgumentTypeError as e:
        parser.error(f"--web: {e}")
