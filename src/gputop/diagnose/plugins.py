"""Third-party diagnostics, from the entry-point group `gputop.diagnostics`.

A package declares, in its pyproject.toml:

    [project.entry-points."gputop.diagnostics"]
    ecc_rising = "gputop_diag_example:ECC_CORRECTED_RISING"

and the object it names is a `Diagnostic` or a list of them. A plug-in that fails to import or
names something else is skipped, and the reason is returned for the engine to report: a broken
plug-in never stops gputop.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable

from gputop.diagnose.types import Diagnostic

GROUP = "gputop.diagnostics"


def load_plugins() -> tuple[list[Diagnostic], list[tuple[str, str]]]:
    """(diagnostics, [(plug-in name, why it was skipped)])."""
    found: list[Diagnostic] = []
    broken: list[tuple[str, str]] = []
    try:
        points = list(importlib.metadata.entry_points(group=GROUP))
    except Exception as e:
        return [], [(GROUP, f"cannot list plug-ins: {type(e).__name__}: {e}")]
    for ep in points:
        name = getattr(ep, "name", "?")
        try:
            obj = ep.load()
            diags = _diagnostics(obj)
        except Exception as e:
            broken.append((name, f"{type(e).__name__}: {e}"))
            continue
        found += diags
    return found, broken


def _diagnostics(obj: object) -> list[Diagnostic]:
    if isinstance(obj, Diagnostic):
        return [obj]
    if isinstance(obj, Iterable) and not isinstance(obj, (str, bytes)):
        items = list(obj)
        if items and all(isinstance(x, Diagnostic) for x in items):
            return items
    raise TypeError(f"{type(obj).__name__} is not a gputop Diagnostic or a list of them")
