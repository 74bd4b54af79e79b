"""gputop and nvitop on the machine's own GPUs (the real driver): the steady dashboard of each in
a tmux pane of 200x50 (alternating, `--rounds` each), then gputop's headless recorder and
`serve --interval 5` (scraped every 15 s). Each figure is the monitor's CPU time (user + system,
from /proc) over `--duration` seconds after the first `--warm`, as % of one core, and its peak
RSS. Where there is no GPU, `bench/peers_bench.py` does the same on the fake library.

    python bench/real_peers.py [--warm 8] [--duration 30] [--rounds 2]

Needs tmux, gputop and nvitop importable by `python3` (`python3 -m gputop`, `python3 -m nvitop`).
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import tempfile
import threading
import time
import urllib.request

TCK = os.sysconf("SC_CLK_TCK")
_SESSIONS = itertools.count()


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def peak_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measure(name: str, pid: int, warm: float, duration: float) -> None:
    try:
        time.sleep(warm)
        a, t = cpu_ticks(pid), time.monotonic()
        time.sleep(duration)
        b, took = cpu_ticks(pid), time.monotonic() - t
    except FileNotFoundError:
        print(f"{name}: exited before the end of its run", flush=True)
        return
    print(f"{name}: {100 * (b - a) / TCK / took:.2f} % of a core over {took:.0f} s after "
          f"{warm:.0f} s, peak RSS {peak_mib(pid):.1f} MiB", flush=True)


def in_tmux(name: str, cmd: str, warm: float, duration: float) -> None:
    sock = f"real-peers-{os.getpid()}-{next(_SESSIONS)}"  # a server of its own each time
    tmux = ["tmux", "-L", sock]
    subprocess.run([*tmux, "new-session", "-d", "-s", "m", "-x", "200", "-y", "50", cmd],
                   check=True)
    try:
        pane = subprocess.run([*tmux, "display", "-p", "-t", "m", "#{pane_pid}"],
                              capture_output=True, text=True, check=True).stdout
        measure(name, int(pane), warm, duration)
    finally:
        subprocess.run([*tmux, "kill-server"], stderr=subprocess.DEVNULL)


def headless(name: str, cmd: list[str], warm: float, duration: float,
             scrape: str | None = None) -> None:
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    done = threading.Event()

    def scraper() -> None:
        while not done.is_set():
            try:
                urllib.request.urlopen(url, timeout=5).read()
            except OSError:
                done.wait(0.5)
                continue
            done.wait(15)

    if scrape is not None:
        url = scrape
        threading.Thread(target=scraper, daemon=True).start()
    try:
        measure(name, proc.pid, warm, duration)
    finally:
        done.set()
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warm", type=float, default=8)
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--port", type=int, default=9477)
    a = ap.parse_args()
    tuis = [("gputop dashboard", "python3 -m gputop"), ("nvitop dashboard", "python3 -m nvitop")]
    for r in range(a.rounds):
        for name, cmd in tuis if r % 2 == 0 else tuis[::-1]:
            in_tmux(name, cmd, a.warm, a.duration)
    with tempfile.TemporaryDirectory() as tmp:
        headless("gputop --record --headless",
                 ["python3", "-m", "gputop", "--record", f"{tmp}/r.jsonl.gz", "--headless"],
                 a.warm, a.duration)
    headless("gputop serve --interval 5",
             ["python3", "-m", "gputop", "serve", "--interval", "5",
              "--metrics", f"127.0.0.1:{a.port}"],
             a.warm, max(60.0, a.duration), scrape=f"http://127.0.0.1:{a.port}/metrics")


if __name__ == "__main__":
    main()
