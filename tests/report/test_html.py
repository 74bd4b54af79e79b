"""`gputop report FILE --html OUT`: one page that opens anywhere, shows the run, and never lets
a process name or a host name turn into markup."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.commands.report import main
from gputop.model import ProcessSample, SystemInfo
from gputop.recording import RecordingWriter
from gputop.report.html import MAX_POINTS
from gputop.report.recap import CHART_BUCKETS, Trace
from gputop.report.summary import SummaryKeeper
from gputop.testing.synthetic import GIB, H100_RESERVED, H100_TOTAL, node

T0 = 1_800_000_000.0
MiB = 1 << 20
EVIL_SCRIPT = "<img src=x onerror=alert(1)>\x1b]0;pwned\x07.py"
EVIL_HOST = 'node"><img src=x onerror=alert(2)>'


def leaky_run(path: Path, ticks: int = 150) -> None:
    """GPU 1's process leaks memory; its script name and the host name are hostile."""
    with RecordingWriter(path, summarizer=SummaryKeeper()) as w:
        for t in range(ticks):
            used = 40 * GIB + 50 * MiB * max(0, t - 20)
            s = node(2, time=T0 + t, mem_used=40 * GIB, processes=False)
            leaky = replace(s.devices[1], mem_used=used, util_gpu=float(60 + t % 30),
                            mem_free=H100_TOTAL - H100_RESERVED - used)
            p = ProcessSample(pid=77, device_index=1, gpu_mem=used, sm_util=80.0,
                              cmdline=("python3", EVIL_SCRIPT), create_time=T0 - 3600)
            w.write(replace(s, system=SystemInfo(hostname=EVIL_HOST),
                            devices=(s.devices[0], leaky), processes=(p,)))


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("html")
    rec, out = d / "run.gputop", d / "report.html"
    leaky_run(rec)
    assert main([str(rec), "--html", str(out)]) == 0
    return out.read_text(encoding="utf-8")


def test_the_page_stands_alone_no_script_and_nothing_fetched(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    lowered = page.lower()
    assert "<script" not in lowered and "<link" not in lowered and "@import" not in lowered
    assert not re.search(r"<[^>]*\s(src|href)\s*=", lowered) and "url(" not in lowered
    # The only address is the SVG namespace, which names, not fetches.
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}


def test_hostile_names_are_shown_as_text(page: str) -> None:
    assert "<img" not in page and "\x1b" not in page and "\x07" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;\\x1b]0;pwned\\x07.py" in page
    assert "node&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in page


def test_the_page_has_the_header_findings_charts_and_summary(page: str) -> None:
    assert "2 GPUs · 150 ticks · 2027-01-15 08:00:00 to 08:02:29 UTC (2 min 29 s)" in page
    assert "<h2>Findings (1)</h2>" in page and "mem.growth" in page
    assert 'aria-label="Findings timeline"' in page
    assert "WARNING" in page or "CRITICAL" in page  # severity in words, not colour alone
    for title in ("Utilization %", "Memory used GiB", "Power W", "Temperature °C"):
        assert page.count(f'aria-label="{title}"') == 2  # one chart per GPU
    assert page.count('<path class="line"') == 8
    summary = page[page.index("<h2>Summary per GPU</h2>"):page.index("<h2>GPUs over time</h2>")]
    assert summary.count("<tr>") == 3 and "NVIDIA H100" in summary


def test_the_demo_page_shows_every_finding_of_the_text_report(tmp_path: Path) -> None:
    from gputop.feeds.playback import demo_path

    out = tmp_path / "demo.html"
    assert main([str(demo_path()), "--html", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert "loader.starvation" in page and "thermal.sw" in page and "job.straggler" in page
    assert page.count("<h3>GPU ") == 8
    lanes = page.count('<g class="lane">')
    assert lanes == int(re.search(r"<h2>Findings \((\d+)\)</h2>", page).group(1))


def test_long_series_are_cut_to_about_a_thousand_points_keeping_spikes_and_gaps() -> None:
    n = 86_400
    vs = [50.0] * n
    vs[40_001] = 99.0  # one hot tick
    for i in range(60_000, 61_000):
        vs[i] = math.nan  # the GPU was lost for a while
    whole = Trace(CHART_BUCKETS)
    for i, v in enumerate(vs):
        whole.add(T0 + i, v)
    out_t, out_v = whole.points()
    assert len(out_t) == len(out_v) <= MAX_POINTS
    assert 99.0 in out_v and any(math.isnan(v) for v in out_v)
    assert out_t == sorted(out_t)
    short = Trace(CHART_BUCKETS)
    for i in range(10):
        short.add(T0 + i, float(i))
    assert short.points() == ([T0 + i for i in range(10)], [float(i) for i in range(10)])


def test_a_chart_line_cut_in_pieces_merges_into_the_line_of_the_whole() -> None:
    vs = [float((i * 7919) % 101) for i in range(20_000)]
    vs[5_000:5_300] = [math.nan] * 300
    whole = Trace(CHART_BUCKETS)
    for i, v in enumerate(vs):
        whole.add(T0 + i * 0.7, v)
    merged = Trace(CHART_BUCKETS)
    for a, b in ((0, 50), (50, 5_100), (5_100, 19_000), (19_000, 20_000)):
        part = Trace(CHART_BUCKETS)
        for i in range(a, b):
            part.add(T0 + i * 0.7, vs[i])
        merged.merge(Trace.from_json(part.to_json(), CHART_BUCKETS))
    assert merged.width == whole.width
    assert repr(merged.points()) == repr(whole.points())


def test_an_empty_recording_still_makes_a_page(tmp_path: Path) -> None:
    rec, out = tmp_path / "empty.gputop", tmp_path / "empty.html"
    RecordingWriter(rec, summarizer=SummaryKeeper()).close()
    assert main([str(rec), "--html", str(out)]) == 0
    assert "holds no ticks" in out.read_text(encoding="utf-8")


def test_an_unwritable_page_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "run.gputop"
    leaky_run(rec, ticks=5)
    assert main([str(rec), "--html", str(tmp_path / "no-such-dir" / "r.html")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gputop: cannot write") and err.count("\n") == 1


def test_a_finding_that_comes_back_stays_on_one_lane_of_the_timeline() -> None:
    from gputop.diagnose.types import Finding
    from gputop.report.html import _timeline

    def hot(since: float, severity: str) -> Finding:
        return Finding(id="thermal.sw", severity=severity, device=5, pid=None,
                       title="GPU5 <hot>", since=since, until=since + 60)

    svg = _timeline([hot(T0 + k * 600, "warning" if k else "critical") for k in range(3)],
                    T0, T0 + 3600)
    assert svg.count('<g class="lane">') == 1 and svg.count("<rect") == 3
    assert "CRITICAL GPU5 thermal.sw (3 times)" in svg and "GPU5 &lt;hot&gt;" in svg
