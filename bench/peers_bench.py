"""gputop against nvitop on the fake NVIDIA library with a real driver's per-call costs.

Both run in the same invocation, one after the other, on the same scenario: the fake
libnvidia-ml.so.1 of fakenvml (an 8x H100 node training, 10 real dummy processes) with
`scenarios/cost-h100-r580.txt` appended, so that every NVML call costs the CPU and wall time
it costs on a real H100 with driver 580.

    python bench/peers_bench.py --fake /path/to/fakenvml --nvitop /path/to/venv/bin/nvitop
    python bench/peers_bench.py --duration 20 --runs 1        # quick
    python bench/peers_bench.py --before /path/to/old/checkout/.venv/bin/gputop   # + a column
    python bench/peers_bench.py --price nvmlDeviceGetProcessesUtilizationInfo=1376.9
        # also price a call the cost file has no figure for (here as the call it replaces)
    python bench/peers_bench.py --real --rows tui,record,serve   # the machine's own GPUs

Figures (each the median of --runs runs; the spread is printed after it):

* first useful frame: tmux 160x48; from starting the monitor to the first screen that shows the
  utilization of every GPU (tmux's screen read every 10 ms);
* --once wall: `gputop --once` and `nvitop -1`, stdout to /dev/null;
* steady dashboard CPU: tmux 200x50, 1 s refresh, CPU time (user + system, /proc) of the monitor
  after the first --warm seconds, as % of one core;
* headless --record CPU, and serve CPU at --interval 5 (scraped every 15 s as Prometheus
  scrapes: OpenMetrics, gzipped; measured over at least a minute: its slow reads come every 5 and
  15 s), measured the same way (no terminal);
* peak RSS: the largest VmHWM of the dashboard runs;
* MB per GPU-day: what the headless recording grows by per tick in its steady part, plus its
  first keyframe shared over the 300 ticks between keyframes, per GPU, for 86,400 ticks.

CPU is CPU time, not wall time, so other work on a shared machine slows a run without adding to
its figure; it still disturbs caches, hence several runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

TCK = os.sysconf("SC_CLK_TCK")
# Set in some shells; they make Python programs slower than users run them (no .pyc written,
# unbuffered output), so the monitors run without them.
UNSET = ("PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED")
KEYFRAME_EVERY = 300  # gputop.recording.KEYFRAME_EVERY
# A screen is useful once it shows this many GPUs with their utilization.
USEFUL = {
    # a card's GPU bar, or a row of the plain table drawn while the dashboard loads
    "gputop": re.compile(r"(GPU ▕[^%\n]*\d+%)|(^\d+ +NVIDIA [^%\n]+ \d+% )", re.M),
    "nvitop": re.compile(r"\d+W / \d+W .*\d+%"),
}


# ----------------------------------------------------------------------------------------------
# /proc accounting


def _stat(pid: int) -> tuple[int, int]:
    """(parent pid, utime + stime + cutime + cstime in clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    rest = s[s.rindex(")") + 2:].split()
    return int(rest[1]), sum(int(x) for x in rest[11:15])


def _hwm(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree(pid: int) -> tuple[float, int]:
    """CPU seconds and peak RSS (KiB) of `pid` and its descendants."""
    parent, ticks = {}, {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                parent[int(d)], ticks[int(d)] = _stat(int(d))
            except (OSError, ValueError, IndexError):
                continue
    if pid not in ticks:
        return float("nan"), 0
    kids: dict[int, list[int]] = {}
    for p, pp in parent.items():
        kids.setdefault(pp, []).append(p)
    procs, todo = [], [pid]
    while todo:
        p = todo.pop()
        procs.append(p)
        todo.extend(kids.get(p, []))
    return sum(ticks[p] for p in procs) / TCK, sum(_hwm(p) for p in procs)


# ----------------------------------------------------------------------------------------------
# runners


class Tmux:
    """A tmux server of its own with one session running `cmd`."""

    def __init__(self, cmd: list[str], cols: int, rows: int, env: dict[str, str]) -> None:
        self.sock = f"gputop-bench-{os.getpid()}-{time.monotonic_ns()}"
        self.env = env
        shell = "exec env " + " ".join(f"-u {k}" for k in UNSET) + " " + \
            " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " " + \
            " ".join(shlex.quote(x) for x in cmd)
        self.started = time.monotonic()
        self._tmux("-f", "/dev/null", "new-session", "-d", "-s", "b", "-x", str(cols),
                   "-y", str(rows), shell)
        self._tmux("set", "-g", "status", "off")
        self.pid = int(self._tmux("display", "-p", "-t", "b", "#{pane_pid}"))
        self.path = self._tmux("display", "-p", "#{socket_path}").strip()

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.sock, *args], check=True, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "b")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], stderr=subprocess.DEVNULL)
        if self.path and os.path.exists(self.path):  # tmux leaves its socket behind
            os.unlink(self.path)


def first_frame(tool: str, cmd: list[str], gpus: int, env: dict[str, str],
                timeout: float = 20.0) -> float:
    """Seconds from starting `cmd` in tmux 160x48 to a screen with every GPU's utilization."""
    t = Tmux(cmd, 160, 48, env)
    try:
        while time.monotonic() - t.started < timeout:
            if len(USEFUL[tool].findall(t.screen())) >= gpus:
                return time.monotonic() - t.started
            time.sleep(0.01)
        return float("nan")
    finally:
        t.close()


def _environ(env: dict[str, str]) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in UNSET}, **env}


def oneshot(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run (wait4)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=_environ(env), stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (status {status})")
    return wall, ru.ru_utime + ru.ru_stime


def steady(pid_of: Callable[[], int], duration: float, warm: float,
           during: Callable[[float], None] | None = None) -> tuple[float, int]:
    """% of one core from `warm` s to `duration` s after start, and the peak RSS (KiB)."""
    start = time.monotonic()
    pid = pid_of()
    cpu0 = None
    while True:
        t = time.monotonic() - start
        if cpu0 is None and t >= warm:
            cpu0, t0 = tree(pid)[0], t
        if t >= duration:
            break
        if during is not None:
            during(t)
        time.sleep(min(0.2, duration - t))
    cpu1, hwm = tree(pid)
    if cpu0 is None or cpu1 != cpu1:
        raise SystemExit("the monitor exited early")
    return (cpu1 - cpu0) / (t - t0) * 100, hwm


def dashboard(cmd: list[str], env: dict[str, str], duration: float,
              warm: float) -> tuple[float, int]:
    t = Tmux(cmd, 200, 50, env)
    try:
        return steady(lambda: t.pid, duration, warm)
    finally:
        t.close()


def background(cmd: list[str], env: dict[str, str], duration: float, warm: float,
               during: Callable[[float], None] | None = None) -> tuple[float, int]:
    p = subprocess.Popen(cmd, env=_environ(env), stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        return steady(lambda: p.pid, duration, warm, during)
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def record(gputop: list[str], env: dict[str, str], duration: float, warm: float,
           work: Path, gpus: int) -> tuple[float, int, float]:
    """CPU %, peak RSS and MB per GPU-day of a headless recording."""
    path = work / f"bench-{time.monotonic_ns()}.gputop"
    sizes: list[tuple[float, int]] = []

    def watch(t: float) -> None:
        try:
            sizes.append((t, path.stat().st_size))
        except OSError:
            pass

    cpu, hwm = background([*gputop, "--record", str(path), "--headless"], env, duration, warm,
                          watch)
    # Ticks are whole lines; the file grows by one flushed gzip block a tick.
    first = next((s for _, s in sizes if s > 0), 0)
    at_warm = next((s for t, s in sizes if t >= warm), 0)
    last = sizes[-1][1]
    seconds = sizes[-1][0] - next(t for t, s in sizes if s == at_warm)
    per_tick = (last - at_warm) / max(1.0, seconds)  # one tick a second
    per_tick += first / KEYFRAME_EVERY
    path.unlink()
    return cpu, hwm, per_tick * 86400 / gpus / 1e6


# What Prometheus 2.x asks for at each scrape (3.x alike): OpenMetrics, gzipped.
PROMETHEUS = {"Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                        "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
              "Accept-Encoding": "gzip"}


def serve(gputop: list[str], env: dict[str, str], duration: float,
          warm: float) -> tuple[float, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scraped = [-1e9]

    def scrape(t: float) -> None:
        if t - scraped[0] >= 15 and t >= 2:
            try:
                urllib.request.urlopen(urllib.request.Request(
                    f"http://127.0.0.1:{port}/metrics", headers=PROMETHEUS), timeout=5).read()
                scraped[0] = t
            except OSError:
                pass

    return background([*gputop, "serve", "--interval", "5", "--metrics", f"127.0.0.1:{port}"],
                      env, duration, warm, scrape)


# ----------------------------------------------------------------------------------------------


def fake_node(fake: Path, work: Path, pidfile: Path, no_cost: bool,
              prices: list[str]) -> dict[str, str]:
    """The environment that loads fakenvml's library (built in `work` where `fake` holds no
    build) on a scenario of its 8x H100 node, with the driver's costs unless `no_cost`, plus
    `prices` (ENTRY=CPU_US); its dummy processes' PIDs go to `pidfile`."""
    lib = fake / "build"
    if not (lib / "libnvidia-ml.so.1").exists():  # built here: the fakenvml folder may be read-only
        lib = work / "fakenvml"
        if subprocess.run(["make", "-s", "-C", str(fake), f"BUILD={lib}"]).returncode:
            raise SystemExit(f"could not build the fake library of {fake} (make)")
    scenario = work / "scenario.txt"
    subprocess.run([sys.executable, str(fake / "tools" / "mkscenario.py"), "--out",
                    str(scenario), "--pidfile", str(pidfile)], check=True,
                   stdout=subprocess.DEVNULL)
    if not no_cost:
        with open(scenario, "a") as f:
            f.write("\n" + (fake / "scenarios" / "cost-h100-r580.txt").read_text())
            for price in prices:  # the [cost] section is the file's last
                entry, _, cpu = price.partition("=")
                f.write(f"\n{entry.strip()} = {cpu.strip()} {cpu.strip()}\n")
    return {"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_SCENARIO": str(scenario)}


def stop_node(fake: Path, pidfile: Path) -> None:
    """Ends the dummy processes `fake_node` started, if it started them."""
    if pidfile.exists():
        subprocess.run([sys.executable, str(fake / "tools" / "mkscenario.py"), "--kill",
                        str(pidfile)])


def median(xs: list[float]) -> str:
    xs = [x for x in xs if x == x]
    if not xs:
        return "-"
    m = statistics.median(xs)
    return f"{m:.3g}" if len(xs) == 1 else f"{m:.3g} ({min(xs):.3g}-{max(xs):.3g})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fake", default=os.environ.get("FAKENVML", "../shared/fakenvml"),
                    help="the fakenvml folder; its library is built in a temporary folder "
                         "where it has none (default $FAKENVML or ../shared/fakenvml)")
    ap.add_argument("--nvitop", default=shutil.which("nvitop"),
                    help="the nvitop 1.7.2 executable (default: nvitop on PATH)")
    ap.add_argument("--gputop", default=None,
                    help="the gputop executable (default: next to this Python)")
    ap.add_argument("--before", default=None, metavar="GPUTOP",
                    help="another gputop executable (e.g. of an older checkout), measured the "
                         "same way in a column of its own")
    ap.add_argument("--duration", type=float, default=40, help="seconds each steady run lasts")
    ap.add_argument("--warm", type=float, default=10, help="seconds left out at the start")
    ap.add_argument("--runs", type=int, default=3, help="runs of each steady figure")
    ap.add_argument("--starts", type=int, default=5, help="runs of each first frame and one-shot")
    ap.add_argument("--no-cost", action="store_true", help="the fake without the driver's costs")
    ap.add_argument("--real", action="store_true",
                    help="the machine's own GPUs and driver instead of the fake (--fake, "
                         "--no-cost and --price do not apply)")
    ap.add_argument("--price", action="append", default=[], metavar="ENTRY=CPU_US",
                    help="also price an entry point the cost file has no figure for, as a line "
                         "of its [cost] section (repeatable), e.g. "
                         "nvmlDeviceGetProcessesUtilizationInfo=1376.9: the cost of "
                         "nvmlDeviceGetProcessUtilization, which the H100 notes measured alike")
    ap.add_argument("--json", metavar="FILE", help="also write every run's figures to FILE")
    ap.add_argument("--only", choices=["gputop", "nvitop"], default=None)
    ap.add_argument("--rows", default="start,tui,record,serve",
                    help="which figures to measure, comma-separated: start (first frame and "
                         "--once), tui (dashboard CPU and RSS), record, serve (default: all)")
    a = ap.parse_args()
    rows = set(a.rows.split(","))
    if not rows <= {"start", "tui", "record", "serve"}:
        ap.error(f"--rows: unknown {', '.join(sorted(rows - {'start', 'tui', 'record', 'serve'}))}")
    # Killed, it still ends the dummy processes and the tmux servers it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    fake = Path(a.fake).resolve()
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is needed")
    gputop_exe = a.gputop or str(Path(sys.executable).with_name("gputop"))
    tools: dict[str, dict[str, list[str]]] = {}
    if a.before and a.only != "nvitop":
        tools["gputop before"] = {"tui": [a.before], "once": [a.before, "--once"]}
    if a.only != "nvitop":
        tools["gputop"] = {"tui": [gputop_exe], "once": [gputop_exe, "--once"]}
    if a.only != "gputop":
        if not a.nvitop:
            print("nvitop not found (--nvitop PATH): gputop only", file=sys.stderr)
        else:
            tools["nvitop"] = {"tui": [a.nvitop, "--interval", "1"], "once": [a.nvitop, "-1"]}

    work = Path(tempfile.mkdtemp(prefix="gputop-bench-"))
    env = {"TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": str(work)}
    pidfile = work / "dummies.pid"
    if a.real:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        gpus = listed.stdout.count("\nGPU ") + listed.stdout.startswith("GPU ")
        if listed.returncode or not gpus:
            raise SystemExit("--real: nvidia-smi -L lists no GPU")
    else:
        gpus = 8
        env.update(fake_node(fake, work, pidfile, a.no_cost, a.price))
    res: dict[str, dict[str, list[float]]] = {t: {} for t in tools}

    def add(tool: str, key: str, v: float) -> None:
        res[tool].setdefault(key, []).append(v)

    try:
        for cmds in tools.values():  # one unmeasured start of each: caches warm
            oneshot(cmds["once"], env)
        for _ in range(a.starts if "start" in rows else 0):
            for tool, cmds in tools.items():
                add(tool, "frame", first_frame(tool.split()[0], cmds["tui"], gpus, env))
                wall, cpu = oneshot(cmds["once"], env)
                add(tool, "once", wall)
                add(tool, "once_cpu", cpu)
        for _ in range(a.runs):
            for tool, cmds in tools.items():
                if "tui" not in rows:
                    break
                cpu, hwm = dashboard(cmds["tui"], env, a.duration, a.warm)
                add(tool, "tui", cpu)
                add(tool, "rss", hwm / 1024)
            for tool, cmds in tools.items():
                if not tool.startswith("gputop"):
                    continue
                g = cmds["tui"]
                if "record" in rows:
                    cpu, hwm, mb = record(g, env, a.duration, a.warm, work, gpus)
                    add(tool, "record", cpu)
                    add(tool, "rss_record", hwm / 1024)
                    add(tool, "mb_day", mb)
                if "serve" not in rows:
                    continue
                # A poll every 5 s, PCIe throughput every 15 s: a window of whole minutes.
                cpu, hwm = serve(g, env, a.warm + max(60.0, a.duration - a.warm), a.warm)
                add(tool, "serve", cpu)
                add(tool, "rss_serve", hwm / 1024)
    finally:
        stop_node(fake, pidfile)
        shutil.rmtree(work, ignore_errors=True)

    rows = [
        ("first useful frame, 160x48 tmux (s)", "frame"),
        ("--once wall (s)", "once"),
        ("--once CPU (s)", "once_cpu"),
        ("steady dashboard 200x50, 1 s (% of a core)", "tui"),
        ("headless --record (% of a core)", "record"),
        ("serve --interval 5 (% of a core)", "serve"),
        ("peak RSS, dashboard (MiB)", "rss"),
        ("peak RSS, headless --record (MiB)", "rss_record"),
        ("peak RSS, serve (MiB)", "rss_serve"),
        ("recording, MB per GPU-day", "mb_day"),
    ]
    cost = "no per-call costs" if a.no_cost else "cost-h100-r580"
    node = f"this machine's {gpus} GPU(s)" if a.real else f"fake NVML 8x H100 ({cost})"
    print(f"{node}; median (min-max) of {a.starts} starts, "
          f"{a.runs} steady runs of {a.duration:g} s measured from {a.warm:g} s")
    names = list(tools)
    width = max(len(label) for label, _ in rows)
    print(f"| {'':{width}s} | " + " | ".join(f"{n:>20s}" for n in names) + " |")
    print(f"|{'-' * (width + 2)}|" + "|".join("-" * 22 for _ in names) + "|")
    for label, key in rows:
        cells = [median(res[n].get(key, [])) for n in names]
        print(f"| {label:{width}s} | " + " | ".join(f"{c:>20s}" for c in cells) + " |")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
