"""A recording as a table (`gputop export FILE -o OUT.csv|OUT.parquet`) for pandas, DuckDB or a
spreadsheet.

One row per (time, GPU) with the main device fields, or with `--processes` one row per (time,
process on a GPU). A field with no value at that tick is an empty cell (CSV) or null (Parquet);
why it has none stays in the recording. Parquet needs pyarrow, which gputop does not require.

The ticks are read in record form (docs/recording.md: the Snapshot JSON with keyed lists) and
never built into Snapshots: a day of ticks is exported in about the time it takes to read it.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gputop.errors import GputopError
from gputop.model import JobInfo, from_dict
from gputop.recording import SeriesReader
from gputop.report.output import replacing
from gputop.safetext import printable

# (column, type) where type is one of: float, int, str, bool. Device columns are read from the
# device object under the same name.
DEVICE_FIELDS: tuple[tuple[str, type], ...] = (
    ("util_gpu", float), ("util_mem", float), ("mem_used", int), ("mem_total", int),
    ("mem_free", int), ("temp_gpu", float), ("temp_mem", float), ("power_draw", float),
    ("power_limit", float), ("energy_j", float), ("clock_sm", int), ("clock_mem", int),
    ("pstate", int), ("fan", float), ("pcie_rx", float), ("pcie_tx", float),
    ("gr_active", float), ("sm_active", float), ("tensor_active", float),
    ("dram_active", float), ("ecc_corrected", int), ("ecc_uncorrected", int),
)
DEVICE_COLUMNS: tuple[tuple[str, type], ...] = (
    ("time", float), ("time_utc", str), ("gpu", int), ("name", str), ("uuid", str),
    *DEVICE_FIELDS, ("throttle", str), ("lost", bool),
)
PROCESS_COLUMNS: tuple[tuple[str, type], ...] = (
    ("time", float), ("time_utc", str), ("gpu", int), ("pid", int), ("name", str),
    ("user", str), ("command", str), ("gpu_mem", int), ("sm_util", float), ("mem_util", float),
    ("cpu_percent", float), ("rss", int), ("workers", int), ("job", str),
)
BATCH_TICKS = 3600  # Parquet: ticks per row group, so memory stays flat on a long recording


def export(path: str, out: str, *, processes: bool = False) -> tuple[int, str | None]:
    """Writes the table; returns (rows written, the reader's warning about a damaged tail)."""
    suffix = Path(out).suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise GputopError(f"cannot tell the format of {out}",
                          hint="name the output OUT.csv or OUT.parquet")
    write = _write_parquet if suffix == ".parquet" else _write_csv
    if suffix == ".parquet":
        _pyarrow()  # before reading anything
    reader = SeriesReader(path)
    columns = PROCESS_COLUMNS if processes else DEVICE_COLUMNS
    rows = (process_rows if processes else device_rows)(reader.states())
    with replacing(out) as part:  # never through a link planted at `out`
        n = write(part, columns, rows)
    return n, reader.warning


# -- rows ------------------------------------------------------------------------------------


def device_rows(states: Iterator[Mapping[str, Any]]) -> Iterator[list[Any]]:
    """One row per (tick, GPU), in DEVICE_COLUMNS order."""
    for st in states:
        t = st.get("time")
        utc = _utc(t)
        for d in _values(st.get("devices")):
            tt = d.get("throttle")
            yield [t, utc, d.get("index"), d.get("name"), d.get("uuid"),
                   *[_typed(d.get(name), kind) for name, kind in DEVICE_FIELDS],
                   ";".join(str(x) for x in tt) if isinstance(tt, list) else None,
                   d.get("lost") is not None]


def process_rows(states: Iterator[Mapping[str, Any]]) -> Iterator[list[Any]]:
    """One row per (tick, process on a GPU), in PROCESS_COLUMNS order."""
    for st in states:
        t = st.get("time")
        utc = _utc(t)
        for p in _values(st.get("processes")):
            cmd = p.get("cmdline")
            job = p.get("job")
            yield [t, utc, p.get("device_index"), p.get("pid"), p.get("name"), p.get("user"),
                   " ".join(str(a) for a in cmd) if isinstance(cmd, list) else None,
                   _typed(p.get("gpu_mem"), int), _typed(p.get("sm_util"), float),
                   _typed(p.get("mem_util"), float), _typed(p.get("cpu_percent"), float),
                   _typed(p.get("rss"), int), len(p.get("children") or ()),
                   from_dict(JobInfo, job).label() or None if isinstance(job, dict) else None]


def _values(keyed: object) -> list[Mapping[str, Any]]:
    return [x for x in keyed.values() if isinstance(x, dict)] if isinstance(keyed, dict) else []


def _typed(v: object, kind: type) -> Any:
    """The value if it has the column's type (an int is a float too), else None."""
    if isinstance(v, bool):
        return v if kind is bool else None
    if kind is float and isinstance(v, (int, float)):
        return float(v)
    return v if isinstance(v, kind) else None


def _utc(t: object) -> str | None:
    if not isinstance(t, (int, float)):
        return None
    secs, ms = divmod(round(t * 1000), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{ms:03d}Z"


# -- writers ---------------------------------------------------------------------------------


def _write_csv(out: str, columns: tuple[tuple[str, type], ...],
               rows: Iterator[list[Any]]) -> int:
    n = 0
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([name for name, _ in columns])
        for row in rows:
            w.writerow([_cell(v) for v in row])
            n += 1
    return n


def _cell(v: Any) -> Any:
    """A CSV cell: empty for no value; text a spreadsheet would run as a formula is quoted."""
    if v is None:
        return ""
    if isinstance(v, str):
        v = printable(v)
        if v[:1] in ("=", "+", "-", "@"):
            return "'" + v  # OWASP: a process named =HYPERLINK(...) stays text
    return v


def _write_parquet(out: str, columns: tuple[tuple[str, type], ...],
                   rows: Iterator[list[Any]]) -> int:
    pa, pq = _pyarrow()
    types = {float: pa.float64(), int: pa.int64(), str: pa.string(), bool: pa.bool_()}
    schema = pa.schema([(name, types[kind]) for name, kind in columns])
    n = 0
    with pq.ParquetWriter(out, schema) as w:
        batch: list[list[Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= BATCH_TICKS * 8:
                n += _flush(pa, w, schema, batch)
        n += _flush(pa, w, schema, batch)
    return n


def _flush(pa: Any, writer: Any, schema: Any, batch: list[list[Any]]) -> int:
    n = len(batch)
    if n:
        cols = list(zip(*batch))
        writer.write_table(pa.Table.from_arrays(
            [pa.array(c, type=schema.field(i).type) for i, c in enumerate(cols)], schema=schema))
        batch.clear()
    return n


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise GputopError("writing Parquet needs pyarrow: pip install pyarrow "
                          "(or export to .csv)") from None
    return pa, pq


__all__ = ["DEVICE_COLUMNS", "PROCESS_COLUMNS", "device_rows", "export", "process_rows"]
