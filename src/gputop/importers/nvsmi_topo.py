"""Read the matrix of `nvidia-smi topo -m` into a Topology.

Only GPU rows and GPU columns are kept: NIC rows and columns, the "GPU NUMA ID" column and the
legend are dropped. Labels stay as printed (X, NV12, PIX, PXB, PHB, NODE, SYS). The output comes
with tabs, or with the tabs already expanded into spaces when it was pasted into a document, and
some versions wrap the header in terminal escape codes; all of these are read.
"""

from __future__ import annotations

import re

from gputop.model import Topology

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Header cells are one tab apart, or at least two spaces once tabs were expanded; one space is
# part of a name ("CPU Affinity").
_HEADER_SEP = re.compile(r"\t+| {2,}")
_GPU = re.compile(r"GPU\d+")
_FIRST_AFTER_MATRIX = "CPU Affinity"


def parse_topo_matrix(text: str) -> Topology:
    """The GPU-to-GPU part of `nvidia-smi topo -m` output.

    `cpu_affinity` and `numa_affinity` hold one entry per GPU row, "" where nvidia-smi printed
    nothing (Windows) or "N/A". Raises ValueError when the text is not a `topo -m` matrix.
    """
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    at = _header_index(lines)
    header = [c for c in _HEADER_SEP.split(lines[at].strip()) if c]
    n_cells = header.index(_FIRST_AFTER_MATRIX)
    columns, trailing = header[:n_cells], header[n_cells:]
    gpu_columns = [i for i, name in enumerate(columns) if _GPU.fullmatch(name)]

    labels: list[str] = []
    matrix: list[tuple[str, ...]] = []
    cpu: list[str] = []
    numa: list[str] = []
    for line in lines[at + 1:]:
        if not line:
            break  # the legend follows a blank line
        label, cells, rest = _split_row(line, n_cells, len(trailing))
        if not _GPU.fullmatch(label):
            continue  # a NIC row
        labels.append(label)
        matrix.append(tuple(cells[i] for i in gpu_columns))
        # With tabs, an empty field follows "NUMA Affinity" (a second tab for the long header),
        # so only the first two cells after the matrix are read.
        cpu.append(_blank_if_na(rest[0]) if rest else "")
        numa.append(_blank_if_na(rest[1]) if len(rest) > 1 else "")

    gpu_names = [columns[i] for i in gpu_columns]
    if labels != gpu_names:
        raise ValueError(
            f"`nvidia-smi topo -m` matrix is not square: rows {labels}, columns {gpu_names}"
        )
    return Topology(matrix=tuple(matrix), cpu_affinity=tuple(cpu), numa_affinity=tuple(numa))


def _header_index(lines: list[str]) -> int:
    for i, line in enumerate(lines):
        cells = [c for c in _HEADER_SEP.split(line.strip()) if c]
        if _FIRST_AFTER_MATRIX in cells and _GPU.fullmatch(cells[0]):
            return i
    raise ValueError(
        "not `nvidia-smi topo -m` output: no header row with GPU columns and 'CPU Affinity'"
    )


def _split_row(line: str, n_cells: int, n_trailing: int) -> tuple[str, list[str], list[str]]:
    """Row label, the matrix cells, and the cells after them."""
    if "\t" in line:
        # Positions are exact and an empty field is an empty cell.
        fields = [f.strip() for f in line.split("\t")]
    else:
        # Tabs expanded: matrix cells are never empty and hold no spaces, so whitespace splits.
        fields = line.split()
        # Blank cells vanished with the tabs. nvidia-smi leaves the affinity cells blank
        # (Windows) but always prints "GPU NUMA ID", so the cells left belong to the right.
        missing = 1 + n_cells + n_trailing - len(fields)
        if missing > 0 and len(fields) > n_cells:
            fields[1 + n_cells:1 + n_cells] = [""] * missing
    label, cells, rest = fields[0], fields[1:1 + n_cells], fields[1 + n_cells:]
    if len(cells) < n_cells:
        raise ValueError(f"`nvidia-smi topo -m` row {label} has {len(cells)} of {n_cells} cells")
    return label, cells, rest


def _blank_if_na(cell: str) -> str:
    return "" if cell == "N/A" else cell
