"""Every real log gputop can import, through the importers and every diagnostic: each shows only
what is there. Most are idle cards, cards under synthetic load, cards at a SW power cap at rest
(P8) and real jobs, which should show nothing; two idle dumps carry a memory fault the card
reports, which one moment is enough to name (tests/data/realdata/ATTRIBUTION.md).

The wider collection they were picked from is read too when it is there: set GPUTOP_REALDATA to
its folder (by default `shared/realdata` beside the checkout's folder); without it that case
skips. A file of a kind no importer reads (a topology, a torch memory summary, a license) is left
out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gputop.diagnose import default_engine
from gputop.errors import GputopError
from gputop.importers.formats import import_logs

# file -> what its card reports, which the diagnostics should name (every other file: nothing)
KNOWN = {
    # GPU 1 of 4 idle A100s: "Remapped Rows ... Pending : Yes"
    "a100-sxm4-80gb_x4_drv555_idle_thamada_q.txt": {"ecc.remap_pending"},
    # an idle GH200 with "Aggregate ... DRAM Uncorrectable : 1" (its row since remapped)
    "gh200-480gb_x1_drv550_idle_thamada-gls_q.txt": {"ecc.lifetime"},
}

HERE = Path(__file__).resolve().parents[1] / "data" / "realdata"
WIDER = Path(os.environ.get("GPUTOP_REALDATA",
                            Path(__file__).resolve().parents[3] / "shared" / "realdata"))


def logs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*")
                  if p.is_file() and p.suffix != ".md" and not p.name.startswith("LICENSE"))


def findings(path: Path) -> set[str] | None:
    """The ids of what the diagnostics find over the imported log; None when no importer
    reads it."""
    try:
        imported = import_logs([(path.name, path.read_text(errors="replace"))])
    except GputopError:
        return None
    return {f.id for f in default_engine(plugins=False).run(imported.snapshots)}


@pytest.mark.parametrize("path", logs(HERE), ids=lambda p: p.name)
def test_the_real_logs_kept_here_show_what_is_there_and_nothing_else(path: Path) -> None:
    found = findings(path)
    if found is None:  # every device log kept here imports
        assert path.parent.name == "nvidia-smi-topo" or path.name.endswith("compute-apps.csv")
        return
    assert found == KNOWN.get(path.name, set())


def test_the_wider_collection_of_real_logs_shows_what_is_there_and_nothing_else() -> None:
    paths = logs(WIDER)
    if not paths:
        pytest.skip(f"no collection of real logs at {WIDER}")
    seen = {}
    for path in paths:
        found = findings(path)
        if found is not None:
            seen[str(path.relative_to(WIDER))] = found
    assert len(seen) >= 90  # xml, csv, dmon, pmon and rocm-smi logs, at least
    assert {name: ids for name, ids in seen.items() if ids} == {
        name: KNOWN[Path(name).name] for name in seen if Path(name).name in KNOWN}
