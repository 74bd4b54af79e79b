"""How `gputop` starts: what a one-shot and the dashboard's first frame load and wait for."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gputop.commands import main as main_module
from gputop.sources.cpu_start import CpuStart
from gputop.sources.poller import Poller
from gputop.testing.fake_nvml import FakeNvml
from gputop.testing.synthetic import node

# Run in a fresh interpreter over the fake library: what is in sys.modules once it is done.
ONCE = """
import io, json, sys
from gputop.testing.fake_nvml import FakeNvml
from gputop.testing.synthetic import node
from gputop.commands.main import main
with FakeNvml([node(2)]):
    sys.stdout = io.StringIO()
    rc = main(ARGS)
    out, sys.stdout = sys.stdout.getvalue(), sys.__stdout__
print(json.dumps({"rc": rc, "out": out, "modules": sorted(sys.modules)}))
"""


def run_once(*args: str) -> dict[str, object]:
    code = ONCE.replace("ARGS", repr(list(args)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    result: dict[str, object] = json.loads(r.stdout)
    return result


@pytest.mark.parametrize("args", [["--once"], ["--once", "--json"]])
def test_a_one_shot_loads_no_dashboard_diagnostics_exporter_or_completion(
        args: list[str]) -> None:
    r = run_once(*args)
    assert r["rc"] == 0 and "NVIDIA H100" in str(r["out"])
    loaded = {m.split(".")[0] if not m.startswith("gputop.") else ".".join(m.split(".")[:2])
              for m in r["modules"]}  # type: ignore[attr-defined]
    for heavy in ("textual", "rich", "prometheus_client", "argcomplete", "build_manpages",
                  "asyncio", "gputop.diagnose", "gputop.recording", "gputop.report",
                  "gputop.export"):
        assert heavy not in loaded, heavy


def test_a_one_shot_measures_cpu_from_a_reading_taken_as_it_started(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    given: list[CpuStart | None] = []
    prime = Poller.prime

    def spy(self: Poller, cpu_start: CpuStart | None = None) -> float:
        given.append(cpu_start)
        return prime(self, cpu_start)

    monkeypatch.setattr(Poller, "prime", spy)
    with FakeNvml([node(2)]):
        assert main_module.main(["--once"]) == 0
    (reading,) = given
    assert isinstance(reading, CpuStart) and reading.processes  # every process, read at start
    assert "NVIDIA H100" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "tty", "once"), [
    (["--once"], True, True),
    (["--json"], True, True),
    (["--on", "--js"], True, True),  # argparse's abbreviations
    (["--interval", "2", "--once"], True, True),
    ([], False, True),  # a pipe gets one snapshot
    ([], True, False),  # the dashboard
    (["--record", "x.gputop"], True, False),
    (["replay", "--once"], False, False),  # a subcommand, not the monitor
    (["report", "x"], False, False),
])
def test_which_command_lines_take_the_cpu_reading_at_start(
        argv: list[str], tty: bool, once: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty)
    assert main_module._may_print_once(argv) is once


# The dashboard up to its first frame, in a fresh interpreter: what was loaded when the GPUs were
# drawn, and what the frame showed. It stops there (the drawing raises).
FIRST_FRAME = """
import json, sys
from gputop.testing.fake_nvml import FakeNvml
from gputop.testing.synthetic import node
from gputop.commands import monitor

frames = []

def draw(snap, out):
    frames.append({"users": sorted({str(p.user) for p in snap.processes}),
                   "gpus": len(snap.devices),
                   "loaded": sorted(m for m in ("gputop.diagnose", "gputop.sources.host",
                                                "psutil", "textual") if m in sys.modules)})
    if len(frames) == 2:
        raise KeyboardInterrupt
    return True

monitor._draw_plain_frame = draw
monitor._leave_plain_frame = lambda out: None
with FakeNvml([node(2)]):
    try:
        monitor.run_dashboard(monitor.build_parser().parse_args([]))
    except KeyboardInterrupt:
        pass
print(json.dumps(frames))
"""


def test_the_dashboards_first_frame_shows_the_gpus_before_the_host_and_diagnostics_load(
        ) -> None:
    r = subprocess.run([sys.executable, "-c", FIRST_FRAME], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    gpus, whole = json.loads(r.stdout)
    assert gpus["gpus"] == whole["gpus"] == 2
    assert gpus["loaded"] == []  # neither the host's readers nor the diagnostics nor Textual
    assert gpus["users"] == ["Missing(reason='pending', since=None, detail='')"]
    assert "pending" not in " ".join(whole["users"])  # then redrawn with the processes' users


# As the gputop program (main() with no argv), which a one-shot ends at once after printing.
PROGRAM = """
import sys
from gputop.testing.fake_nvml import FakeNvml
from gputop.testing.synthetic import node
from gputop.commands.main import main
sys.argv = ["gputop", *ARGS]
FakeNvml([node(8, links=18)]).__enter__()
sys.exit(main())
"""


def test_a_one_shot_run_as_the_program_prints_its_whole_snapshot_before_it_exits() -> None:
    code = PROGRAM.replace("ARGS", repr(["--once", "--json"]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # all of it, though stdout is a pipe (block-buffered)
    assert len(doc["devices"]) == 8 and len(doc["links"]) == 8 * 18
    assert r.stderr == ""
