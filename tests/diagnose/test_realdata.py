"""Every real log gputop can import, through the importers and every diagnostic: none of them
shows a problem that is not there. They are idle cards, cards under synthetic load, cards at a
SW power cap at rest (P8) and real jobs (tests/data/realdata/ATTRIBUTION.md).

The wider collection they were picked from is read too when it is there: set GPUTOP_REALDATA to
its folder (by default `shared/realdata` beside the checkout's folder); without it those cases
skip. A file of a kind no importer reads (a topology, a torch memory summary, a text dump before
its importer exists) is left out. The causes their notes name (idle, synthetic load at the
default limits, SW power cap at rest, MIG, a busy job, old corrected ECC errors) are none a
finding should name; a log of a real fault would be listed here with the ids it should give."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputop.diagnose import default_engine
from gputop.errors import GputopError
from gputop.importers.formats import import_logs

HERE = Path(__file__).resolve().parents[1] / "data" / "realdata"
WIDER = Path(os.environ.get("GPUTOP_REALDATA",
                            Path(__file__).resolve().parents[3] / "shared" / "realdata"))


def logs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".md")


def findings(path: Path) -> set[str] | None:
    """The ids of what the diagnostics find over the imported log; None when no importer
    reads it."""
    try:
        imported = import_logs([(path.name, path.read_text(errors="replace"))])
    except GputopError:
        return None
    return {f.id for f in default_engine(plugins=False).run(imported.snapshots)}


@pytest.mark.parametrize("path", logs(HERE), ids=lambda p: p.name)
def test_the_real_logs_kept_here_show_no_false_alarm(path: Path) -> None:
    found = findings(path)
    if found is None:  # every device log kept here imports
        assert path.parent.name == "nvidia-smi-topo" or path.name.endswith("compute-apps.csv")
        return
    assert found == set()


def test_the_wider_collection_of_real_logs_shows_no_false_alarm() -> None:
    paths = logs(WIDER)
    if not paths:
        pytest.skip(f"no collection of real logs at {WIDER}")
    seen = {}
    for path in paths:
        found = findings(path)
        if found is not None:
            seen[str(path.relative_to(WIDER))] = found
    assert len(seen) >= 90  # xml, csv, dmon, pmon and rocm-smi logs, at least
    assert {name: ids for name, ids in seen.items() if ids} == {}
