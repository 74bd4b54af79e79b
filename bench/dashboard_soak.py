"""Whether the live dashboard's memory stays flat over a long run.

Starts `gputop` (the demo by default) in a real terminal (tmux), as a user would, and samples
its resident memory (RSS) and CPU time every `--every` seconds for `--seconds`:

    python bench/dashboard_soak.py                          # --demo --interval 0.2, 10 min
    python bench/dashboard_soak.py --seconds 120 --every 10 -- --demo --interval 1
    LD_LIBRARY_PATH=.../fakenvml/build python bench/dashboard_soak.py --seconds 1260 \
        -- --interval 0.2                                   # live polling, a fake NVML

Prints one line per sample and, at the end, RSS at the first minute and at the end, its
growth, and the CPU used over the run as % of one core. The diagnostics keep ten minutes of
ticks (one a second, whatever the interval), so live polling grows for ten minutes and is flat
after: runs longer than that also print the growth after the tenth minute."""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import psutil


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--every", type=float, default=30.0)
    p.add_argument("--size", default="120x40")
    p.add_argument("gputop_args", nargs="*", default=["--demo", "--interval", "0.2"])
    args = p.parse_args()
    if shutil.which("tmux") is None:
        print("dashboard_soak: needs tmux", file=sys.stderr)
        return 2
    cols, rows = args.size.split("x")
    session = f"gputop-soak-{int(time.time())}"
    cmd = shlex.join([sys.executable, "-m", "gputop", *args.gputop_args])
    with tempfile.TemporaryDirectory() as tmp:
        sock = ["tmux", "-S", f"{tmp}/tmux"]
        subprocess.run([*sock, "new-session", "-d", "-s", session, "-x", cols, "-y", rows,
                        "-e", "TERM=xterm-256color", cmd], check=True)
        try:
            pane_pid = int(subprocess.run([*sock, "list-panes", "-t", session, "-F",
                                           "#{pane_pid}"], check=True, capture_output=True,
                                          text=True).stdout.split()[0])
            proc = psutil.Process(pane_pid)
            print(f"gputop {' '.join(args.gputop_args)} at {args.size}, pid {pane_pid}")
            print(f"{'s':>6} {'RSS MiB':>8} {'CPU %':>6}")
            start = time.monotonic()
            cpu0 = sum(proc.cpu_times()[:2])
            samples: list[tuple[float, float]] = []
            last_cpu, last_t = cpu0, start
            for n in range(int(args.seconds // args.every) + 1):
                time.sleep(max(0.0, start + n * args.every - time.monotonic()))
                t = time.monotonic() - start
                rss = proc.memory_info().rss / 2**20
                cpu = sum(proc.cpu_times()[:2])
                now = time.monotonic()
                pct = 100 * (cpu - last_cpu) / max(1e-9, now - last_t)
                last_cpu, last_t = cpu, now
                samples.append((t, rss))
                print(f"{t:6.0f} {rss:8.1f} {pct:6.1f}", flush=True)
            cpu_total = sum(proc.cpu_times()[:2]) - cpu0
            elapsed = time.monotonic() - start
        finally:
            subprocess.run([*sock, "kill-server"], check=False)
    after_warmup = next((r for t, r in samples if t >= 60), samples[0][1])
    end = samples[-1][1]
    print(f"RSS at 1 min {after_warmup:.1f} MiB, at {samples[-1][0]:.0f} s {end:.1f} MiB "
          f"(growth {end - after_warmup:+.1f} MiB); peak {max(r for _, r in samples):.1f} MiB; "
          f"CPU {100 * cpu_total / elapsed:.1f} % of one core")
    if args.seconds > 660:  # the diagnostics keep ten minutes of ticks: flat from then on
        at10 = next(r for t, r in samples if t >= 600)
        print(f"after 10 min: {at10:.1f} MiB, then {end - at10:+.1f} MiB to the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
