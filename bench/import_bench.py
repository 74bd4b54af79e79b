"""How fast `gputop import` reads a long `nvidia-smi --query-gpu` CSV log.

Builds an 8-GPU, 10-minute log at 1 Hz from the real H100 row in tests/data/realdata (all ~210
fields nvidia-smi 590 offers) and prints rows per second and the projected time for a day.

    python bench/import_bench.py
"""

from __future__ import annotations

import time
from pathlib import Path

from gputop.importers.nvsmi_csv import parse_query_gpu_csv

SAMPLE = (Path(__file__).parent.parent / "tests" / "data" / "realdata" / "nvidia-smi-csv"
          / "nvidia-h100-80gb-hbm3_x1_drv590.48.01_linux_load_query-gpu.csv")
GPUS, SECONDS = 8, 600


def build_log() -> str:
    header, row = SAMPLE.read_text(encoding="utf-8").splitlines()[:2]
    names = [c.strip() for c in header.split(",")]
    cells = [c.strip() for c in row.split(",")]
    at_index, at_time, at_util = (names.index(n) for n in
                                  ("index", "timestamp", "utilization.gpu [%]"))
    lines = [header]
    for t in range(SECONDS):
        for gpu in range(GPUS):
            cells[at_index] = str(gpu)
            cells[at_time] = f"2026/07/14 08:{t // 60:02d}:{t % 60:02d}.353"
            cells[at_util] = f"{(t * 7 + gpu * 13) % 101} %"
            lines.append(", ".join(cells))
    return "\n".join(lines) + "\n"


def main() -> None:
    text = build_log()
    rows = GPUS * SECONDS
    t0 = time.perf_counter()
    snaps = parse_query_gpu_csv(text)
    took = time.perf_counter() - t0
    assert len(snaps) == SECONDS and len(snaps[0].devices) == GPUS
    print(f"{rows} rows ({len(text) / 1e6:.1f} MB) in {took:.2f} s: {rows / took:,.0f} rows/s; "
          f"a day of {GPUS} GPUs at 1 Hz would take {GPUS * 86400 / (rows / took):.0f} s")


if __name__ == "__main__":
    main()
