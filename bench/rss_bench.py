"""Where the dashboard's resident memory goes, one layer at a time.

Each step imports or opens one more thing in a fresh Python, as the dashboard does, and reads
its resident memory (VmRSS); then a bare Textual app that shows one line per GPU from NVML and
the dashboard itself each run in a real terminal (tmux 200x50) for `--seconds`, and their peak
(VmHWM) is read as peers_bench.py reads it. Run it where the dashboard finds its GPUs, e.g. on
the fake NVIDIA library with a real driver's costs (fakenvml's rss_mib makes nvmlInit hold the
18.5 MiB the real library holds):

    LD_LIBRARY_PATH=.../fakenvml/build FAKE_NVML_SCENARIO=scenario.txt \\
        python bench/rss_bench.py --seconds 30

The difference between the bare app and the dashboard is what gputop itself holds: its modules
and what it builds and keeps while it runs."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from peers_bench import Tmux, _hwm

STATUS = 'int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])'
# (label, code run after the steps before it)
STEPS = [
    ("Python", "pass"),
    ("asyncio (without OpenSSL, as ui/no_tls.py loads it)", "import gputop.ui.no_tls"),
    ("NVIDIA's binding (pynvml)", "import pynvml"),
    ("nvmlInit (the driver library's own memory)", "pynvml.nvmlInit()"),
    ("psutil", "import psutil"),
    ("Rich and Textual (textual.app, textual.widgets)",
     "import textual.app, textual.widgets, textual.widgets._footer, textual.widgets._input"),
    ("gputop's modules for the dashboard",
     "import gputop.commands.monitor, gputop.ui.app, gputop.feeds.diagnosed, "
     "gputop.feeds.live, gputop.sources.nvml, gputop.sources.host, gputop.diagnose"),
]
BARE_APP = textwrap.dedent("""
    import sys
    sys.modules["ssl"] = None  # as gputop.ui.no_tls
    import asyncio
    del sys.modules["ssl"]
    import psutil, pynvml
    from textual.app import App
    from textual.widgets import Static
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    class Bare(App):
        def compose(self):
            yield Static("", id="gpus")

        def on_mount(self):
            self.set_interval(1, self.tick)
            self.tick()

        def tick(self):
            self.query_one("#gpus", Static).update("\\n".join(
                f"GPU {i} {pynvml.nvmlDeviceGetUtilizationRates(h).gpu}% "
                f"CPU {psutil.cpu_percent()}%" for i, h in enumerate(handles)))

    Bare().run()
""")


def layers() -> list[tuple[str, float]]:
    """(step, VmRSS in MiB after it), all steps in one fresh Python."""
    code = ["out = []"]
    for label, step in STEPS:
        code += [step, f"out.append(({label!r}, {STATUS} / 1024))"]
    code.append("import json; print(json.dumps(out))")  # json last: it loads re and enum
    res = subprocess.run([sys.executable, "-c", "\n".join(code)], check=True, text=True,
                         stdout=subprocess.PIPE)
    return [(label, mib) for label, mib in json.loads(res.stdout)]


def peak(cmd: list[str], seconds: float) -> float:
    """VmHWM (MiB) of `cmd` after `seconds` in tmux 200x50."""
    env = {k: os.environ[k] for k in ("LD_LIBRARY_PATH", "FAKE_NVML_SCENARIO") if k in os.environ}
    t = Tmux(cmd, 200, 50, {**env, "TERM": "xterm-256color", "LANG": "C.UTF-8"})
    try:
        time.sleep(seconds)
        kb = _hwm(t.pid)
        if not kb:
            raise SystemExit(f"{' '.join(cmd)} exited early: {t.screen()}")
        return kb / 1024
    finally:
        t.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=30.0, help="how long each app runs")
    p.add_argument("--gputop", default=str(Path(sys.executable).with_name("gputop")),
                   help="the gputop executable (default: next to this Python)")
    a = p.parse_args()
    prev = 0.0
    print(f"| {'step':58s} | {'VmRSS MiB':>9s} | {'+MiB':>6s} |")
    print(f"|{'-' * 60}|{'-' * 11}|{'-' * 8}|")
    for label, mib in layers():
        print(f"| {label:58s} | {mib:9.1f} | {mib - prev:6.1f} |")
        prev = mib
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(BARE_APP)
    try:
        bare = peak([sys.executable, f.name], a.seconds)
    finally:
        os.unlink(f.name)
    dash = peak([a.gputop], a.seconds)
    print(f"| {f'bare Textual app over NVML, peak at {a.seconds:g} s':58s} | {bare:9.1f} | "
          f"{bare - prev:6.1f} |")
    print(f"| {f'gputop dashboard, peak at {a.seconds:g} s':58s} | {dash:9.1f} | "
          f"{dash - bare:6.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
