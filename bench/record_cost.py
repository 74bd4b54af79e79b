"""Where the headless recorder's CPU goes: the recorder, then the same loop with one part after
another taken away, all running at once on the fake NVIDIA library with a real driver's costs.

    python bench/record_cost.py --fake ../shared/fakenvml
    python bench/record_cost.py --duration 120 --runs 3

Each run starts every variant at the same moment (so that the machine's speed, which moves from
minute to minute, falls on all of them alike) and counts each one's CPU time (user + system,
/proc) from --warm seconds on, at one tick a second over the fake 8x H100 node of peers_bench:

* `gputop --record`: the command, as `peers_bench.py` measures it (it polls in a thread of its
  own and writes in its main thread);
* the same loop in one thread: the live poller, and each tick written with its summary (the
  diagnostics over the tick as a reader gets it back, and the report's recap);
* without the summary: the ticks written, nothing diagnosed;
* without the host's part either: the GPUs alone polled and written (the host's part is /proc:
  the node's CPU, memory and pressure; each GPU process's user, command, CPU share, RSS and
  workers);
* the NVML poll alone: the GPUs polled, nothing written;
* the driver calls alone: the ten calls a GPU a tick of the NVML poll's fast part (utilization,
  memory, temperature, power, two clocks, P-state, clock-event reasons, compute and graphics
  processes) made through the binding's entry points into structs made once, with nothing done
  with their answers: what those calls cost without gputop.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers_bench import _environ, fake_node, stop_node, tree

VARIANTS = {
    "command": "gputop --record",
    "summary": "the same loop in one thread",
    "write": "without the summary",
    "nohost": "without the host's part either",
    "poll": "the NVML poll alone, nothing written",
    "calls": "the fast poll's driver calls alone",
}


def child(variant: str, path: str, interval: float) -> None:
    """Runs `variant` (not "command") until SIGTERM."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if variant == "calls":
        calls_alone(interval)
        return
    from gputop.feeds import one_malloc_arena, settle_gc
    from gputop.feeds.live import HostLater
    from gputop.recording.writer import RecordingWriter
    from gputop.sources.nvml import NvmlSource
    from gputop.sources.poller import Poller

    one_malloc_arena()
    poller = Poller([NvmlSource(slow_interval=5.0)],
                    HostLater() if variant in ("summary", "write") else None)
    poller.open()
    writer = None
    if variant in ("summary", "write", "nohost"):
        summarizer = None
        if variant == "summary":
            from gputop.report.summary import SummaryKeeper

            summarizer = SummaryKeeper()
        writer = RecordingWriter(path, meta={}, summarizer=summarizer)
    settled = False
    next_at = time.monotonic()
    try:
        while True:
            snap = poller.poll_once()
            if writer is not None:
                writer.write(snap)
            if not settled:  # as the recorder does after its first tick
                settle_gc()
                settled = True
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))
    finally:
        if writer is not None:
            writer.close()
        poller.close()


def calls_alone(interval: float) -> None:
    import ctypes

    import pynvml as n

    n.nvmlInit()
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
    entry = n._nvmlGetFunctionPointer
    util, mem, temp = n.c_nvmlUtilization_t(), n.c_nvmlMemory_v2_t(), n.c_nvmlTemperature_v1_t()
    mem.version, temp.version = n.nvmlMemory_v2, n.nvmlTemperature_v1
    number, wide, count = ctypes.c_uint(), ctypes.c_ulonglong(), ctypes.c_uint()
    procs = (n.c_nvmlProcessInfo_v3_t * 16)()
    calls = [
        ("nvmlDeviceGetUtilizationRates", (ctypes.byref(util),)),
        ("nvmlDeviceGetMemoryInfo_v2", (ctypes.byref(mem),)),
        ("nvmlDeviceGetTemperatureV", (ctypes.byref(temp),)),
        ("nvmlDeviceGetPowerUsage", (ctypes.byref(number),)),
        ("nvmlDeviceGetClockInfo", (1, ctypes.byref(number))),
        ("nvmlDeviceGetClockInfo", (2, ctypes.byref(number))),
        ("nvmlDeviceGetPerformanceState", (ctypes.byref(number),)),
        ("nvmlDeviceGetCurrentClocksEventReasons", (ctypes.byref(wide),)),
        ("nvmlDeviceGetComputeRunningProcesses_v3", (ctypes.byref(count), procs)),
        ("nvmlDeviceGetGraphicsRunningProcesses_v3", (ctypes.byref(count), procs)),
    ]
    fns = [(entry(name), args) for name, args in calls]
    next_at = time.monotonic()
    while True:
        for h in handles:
            for fn, args in fns:
                count.value = len(procs)
                fn(h, *args)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))


def run(env: dict[str, str], gputop: list[str], work: Path, duration: float,
        warm: float) -> dict[str, float]:
    """ms of CPU a second of each variant, all started at once."""
    full = _environ(env)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    for name in VARIANTS:
        path = str(work / f"{name}-{time.monotonic_ns()}.gputop")
        cmd = ([*gputop, "--record", path, "--headless"] if name == "command" else
               [sys.executable, __file__, "--child", name, "--path", path])
        procs[name] = subprocess.Popen(cmd, env=full, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       start_new_session=True)
    try:
        time.sleep(warm)
        start = {name: tree(p.pid)[0] for name, p in procs.items()}
        t0 = time.monotonic()
        time.sleep(duration)
        end = {name: tree(p.pid)[0] for name, p in procs.items()}
        elapsed = time.monotonic() - t0
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    for name, p in procs.items():
        if end[name] != end[name]:
            raise SystemExit(f"{VARIANTS[name]} exited early (status {p.returncode})")
    return {name: 1000 * (end[name] - start[name]) / elapsed for name in procs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fake", default=os.environ.get("FAKENVML", "../shared/fakenvml"),
                    help="the fakenvml folder (its library is built there or in a temporary "
                         "folder)")
    ap.add_argument("--gputop", default=None,
                    help="the gputop command (default: this Python's -m gputop)")
    ap.add_argument("--duration", type=float, default=60, help="seconds measured a run")
    ap.add_argument("--warm", type=float, default=10, help="seconds left out at the start")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--child", choices=[v for v in VARIANTS if v != "command"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.path, args.interval)
        return 0
    fake = Path(args.fake).resolve()
    if not (fake / "tools" / "mkscenario.py").exists():
        raise SystemExit(f"{fake} is not a fakenvml folder (--fake)")
    gputop = args.gputop.split() if args.gputop else [sys.executable, "-m", "gputop"]
    figures: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="gputop-record-cost-") as tmp:
        work = Path(tmp)
        pidfile = work / "dummies.pid"
        env = fake_node(fake, work, pidfile, no_cost=False, prices=[])
        try:
            for i in range(args.runs):
                got = run(env, gputop, work, args.duration, args.warm)
                for name, ms in got.items():
                    figures[name].append(ms)
                print(f"run {i + 1}: " + ", ".join(f"{name} {ms:.2f}" for name, ms in
                                                   got.items()), file=sys.stderr)
        finally:
            stop_node(fake, pidfile)
    print(f"The headless recorder at 1 s over the fake 8x H100 node with the driver's costs; "
          f"{args.runs} runs of {args.duration:g} s after {args.warm:g} s, every variant at "
          "once (median, range)\n")
    print(f"| {'what runs':40s} | ms of CPU a second | % of a core |")
    print(f"|{'-' * 42}|-------------------:|------------:|")
    for name, label in VARIANTS.items():
        xs = figures[name]
        m = statistics.median(xs)
        print(f"| {label:40s} | {m:6.2f} ({min(xs):.2f}-{max(xs):.2f}) | {m / 10:10.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
