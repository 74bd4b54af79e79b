"""Third-party diagnostics, from the entry-point group `gputop.diagnostics`.

A package declares, in its pyproject.toml:

    [project.entry-points."gputop.diagnostics"]
    ecc_rising = "gputop_diag_example:ECC_CORRECTED_RISING"

and the object it names is a `Diagnostic` or a list of them. A plug-in that fails to import or
names something else is skipped, and the reason is returned for the engine to report: a broken
plug-in never stops gputop.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from importlib.machinery import PathFinder

from gputop.diagnose.types import Diagnostic

GROUP = "gputop.diagnostics"


def load_plugins() -> tuple[list[Diagnostic], list[tuple[str, str]]]:
    """(diagnostics, [(plug-in name, why it was skipped)])."""
    # importlib.metadata brings email, zipfile and csv with it: 1.6 MiB resident for as long as
    # the dashboard or a recorder runs. It is loaded when some installed package may declare a
    # plug-in (or where it is loaded already), to find them and load them.
    if "importlib.metadata" not in sys.modules and not may_declare(GROUP):
        return [], []
    import importlib.metadata

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


def may_declare(group: str) -> bool:
    """Whether an installed distribution may declare entry points in `group`: False only where
    every one importlib.metadata would find is in a folder on sys.path and none of their
    entry_points.txt names the group. A zip on sys.path, or a finder of distributions other
    than the standard one, may hold anything."""
    if any(hasattr(finder, "find_distributions") and finder is not PathFinder
           for finder in sys.meta_path):
        return True
    for root in sys.path:
        root = root or "."
        try:
            children = os.listdir(root)
        except NotADirectoryError:
            return True
        except OSError:
            continue
        infos = [c for c in children if c.lower().endswith((".dist-info", ".egg-info"))]
        if root.lower().endswith(".egg"):
            infos += [c for c in children if c.lower() == "egg-info"]
        for info in infos:
            try:
                with open(os.path.join(root, info, "entry_points.txt"), encoding="utf-8",
                          errors="replace") as f:
                    if group in f.read():
                        return True
            except OSError:
                continue
    return False
