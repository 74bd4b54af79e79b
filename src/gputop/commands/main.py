"""The `gputop` command: the monitor itself (commands.monitor), or one of its subcommands, each a
module of this package imported only when it is asked for. A `GputopError` anywhere below is
said in one line with its exit code; nothing ends in a traceback unless GPUTOP_DEBUG is set."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from gputop.commands import COMMANDS
from gputop.errors import GputopError

EXIT_INTERRUPTED = 130
ONE_SHOT_FLAGS = ("--o", "--j")  # --once, --json and what argparse takes for them (--on, --js)


def _may_print_once(argv: Sequence[str]) -> bool:
    """Whether `gputop ARGV` may print one snapshot and exit (--once, --json, no terminal)."""
    return (not argv or argv[0].startswith("-")) and (
        any(a.startswith(ONE_SHOT_FLAGS) for a in argv) or not sys.stdout.isatty())


def main(argv: Sequence[str] | None = None) -> int:
    program = argv is None  # run as the gputop command, not called from Python
    argv = list(sys.argv[1:] if argv is None else argv)
    cpu_start = None
    if _may_print_once(argv):
        # Its CPU shares are measured from this moment: the window runs while gputop loads and
        # opens the GPUs rather than after (sources.cpu_start).
        from gputop.sources.cpu_start import read_cpu_start

        cpu_start = read_cpu_start()
    from gputop.commands import monitor

    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (gputop --completion)
        from gputop.commands.complete import complete

        complete(monitor.build_parser())
    try:
        if argv and not argv[0].startswith("-"):
            command = COMMANDS.get(argv[0])
            if command is None:
                print(f"gputop: unknown command {argv[0]!r} (commands: replay, report, import, "
                      "plan, serve, fleet, export; see gputop --help)", file=sys.stderr)
                return 2
            run: Callable[[list[str]], int] = import_module(command).main
            return run(argv[1:])
        return monitor.main(argv, cpu_start=cpu_start, program=program)
    except GputopError as e:
        print(f"gputop: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `gputop --once | head`: the reader left; not an error worth a message.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        if os.environ.get("GPUTOP_DEBUG"):
            raise
        print(f"gputop: internal error: {type(e).__name__}: {e} "
              "(set GPUTOP_DEBUG=1 to see where)", file=sys.stderr)
        return 70
