"""What reading an oversized recording costs: wall time and peak memory of `gputop report
--json`, `gputop export` and `gputop replay --once`, each in a child process as a user runs it,
over three files built to be expensive (docs/recording.md, "Reading safely"):

- `bomb`: about 1 MB on disk, a header, 5 ticks, then one line that inflates to 1 GiB;
- `line`: 5 ticks, then one 50 MB line (a tick with a 50 MB string in it);
- `findings`: 30 ticks and a summary that holds 120,000 findings.

    python bench/reader_bounds_bench.py
    python bench/reader_bounds_bench.py --only bomb --commands report
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from gputop.recording import RecordingWriter, footer, read_summary, summary_place
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import series

COMMANDS = {"report": ["report", "--json"], "export": ["export", "-o", "{dir}/out.csv"],
            "replay": ["replay", "--once"]}


def clean(path: Path, n: int = 30) -> tuple[bytes, list[bytes]]:
    with RecordingWriter(path, summarizer=SummaryKeeper()) as w:
        for s in series(n, 4):
            w.write(s)
    lines = gzip.decompress(path.read_bytes()).splitlines()
    return lines[0], lines[1:n + 1]


def bomb(d: Path) -> Path:
    header, ticks = clean(d / "clean-bomb.gputop")
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    start = z.compress(b"\n".join([header, *ticks[:5]]) + b'\n{"d":{"x":"') + \
        z.flush(zlib.Z_FULL_FLUSH)
    mib = z.compress(b"0" * (1 << 20)) + z.flush(zlib.Z_FULL_FLUSH)
    out = d / "bomb.gputop"
    out.write_bytes(start + mib * 1024 + z.compress(b'"}}\n') + z.flush())
    return out


def line(d: Path) -> Path:
    header, ticks = clean(d / "clean-line.gputop")
    big = json.dumps({"d": {"time": 1_800_000_005.0, "x": "0" * (50 << 20)}}).encode()
    out = d / "line.gputop"
    out.write_bytes(gzip.compress(b"\n".join([header, *ticks[:5], big]) + b"\n", 6))
    return out


def findings(d: Path) -> Path:
    out = d / "findings.gputop"
    clean(out)
    at, _ = summary_place(out) or (0, 0)
    body = read_summary(out)
    one = {"id": "thermal.slowdown", "severity": "warning", "device": 0, "pid": None,
           "start": 1_800_000_000.0, "end": 1_800_000_010.0, "title": "GPU 0 hot",
           "cause": "x" * 200, "fix": "y" * 200, "evidence": {"temp_c": 90}}
    body["findings"] = [dict(one, start=1_800_000_000.0 + i) for i in range(120_000)]
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    member = z.compress(json.dumps({"summary": body}).encode() + b"\n") + z.flush()
    out.write_bytes(out.read_bytes()[:at] + member + footer(at, len(member)))
    return out


FILES = {"bomb": bomb, "line": line, "findings": findings}


def measure(argv: list[str], timeout: float) -> tuple[float, float, int, str]:
    """(seconds, peak RSS in MiB, exit status, last line of stderr) of `gputop ARGV`."""
    # The peak of this process's own memory (VmHWM starts again at exec; ru_maxrss would
    # carry this bench's own, which built the files).
    code = ("import sys\nfrom gputop.cli import main\nrc = main(sys.argv[1:])\n"
            "hwm = [x for x in open('/proc/self/status') if x.startswith('VmHWM')][0]\n"
            "print('maxrss', hwm.split()[1], file=sys.stderr)\nsys.exit(rc)")
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t0, float("nan"), -1, "timed out"
    took = time.perf_counter() - t0
    err = done.stderr.strip().splitlines()
    rss = next((int(x.split()[1]) / 1024 for x in err if x.startswith("maxrss ")), float("nan"))
    said = [x for x in err if not x.startswith("maxrss ")]
    return took, rss, done.returncode, (said[-1] if said else "")[:110]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=FILES, action="append")
    p.add_argument("--commands", choices=COMMANDS, action="append")
    p.add_argument("--timeout", type=float, default=300)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for name in args.only or FILES:
            path = FILES[name](d)
            size = path.stat().st_size / 1e6
            for command in args.commands or COMMANDS:
                argv = [a.format(dir=tmp) for a in COMMANDS[command]]
                took, rss, rc, said = measure([argv[0], str(path), *argv[1:]], args.timeout)
                print(f"{name:9} {size:7.1f} MB  {command:7} {took:6.2f} s  {rss:7.0f} MiB  "
                      f"rc {rc}  {said}", flush=True)


if __name__ == "__main__":
    main()
