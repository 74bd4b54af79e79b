"""Diagnostics that explain a slow or failing training run: pure functions of a window of
Snapshots, run by an engine that turns what they see into Findings with a start and an end."""

from __future__ import annotations

from gputop.diagnose.engine import Engine
from gputop.diagnose.plugins import GROUP, load_plugins
from gputop.diagnose.rules import BUILTIN
from gputop.diagnose.types import SEVERITIES, Condition, Diagnostic, Finding


def default_engine(*, plugins: bool = True) -> Engine:
    """The built-in diagnostics and, unless told not to, the installed plug-ins."""
    extra, broken = load_plugins() if plugins else ([], [])
    return Engine([*BUILTIN, *extra], broken=broken)


__all__ = ["BUILTIN", "GROUP", "SEVERITIES", "Condition", "Diagnostic", "Engine", "Finding",
           "default_engine", "load_plugins"]
