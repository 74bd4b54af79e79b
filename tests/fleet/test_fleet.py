"""`gputop fleet`: many nodes read through Prometheus' HTTP API.

The model is tested on canned answers from a fake Prometheus on loopback (a real HTTP server):
two nodes with their GPUs and values, a node that stops being scraped, one whose samples grow
old, one whose target disappears, one that comes back under a new address, MIG, DCGM's blank
values, a real dcgm-exporter scrape, and every way the server can be wrong at start. The app is
driven with Pilot. Last, the real thing: a real Prometheus scraping two `gputop serve` processes
every second, and a node flagged within two scrape intervals of its exporter stopping.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from rich.text import Text

from gputop.commands.main import main
from gputop.errors import GputopError
from gputop.fleet import model
from gputop.fleet.model import (
    DOWN,
    GONE,
    STALE,
    UP,
    Fleet,
    FleetView,
    build_nodes,
    gauge,
)
from gputop.fleet.promql import Answer, Prometheus, PrometheusError, Sample, normalize_url
from gputop.testing.fake_prometheus import (
    FakeGpu,
    FakeNode,
    FakePrometheus,
    FleetAnswers,
    error,
)
from gputop.testing.prometheus_server import PROMETHEUS, free_port, prometheus, serve, stop
from gputop.ui.fleet import FleetApp, NodeScreen
from gputop.ui.view.status import CROSS

DATA = Path(__file__).resolve().parents[1] / "data" / "dcgm-exporter"
T4_SCRAPE = DATA / "tesla-t4_x1_drv460-470_plus-a10g-k8s-line_PARTLY-DUMMY_datadog-fixture.prom"
MiB = 1 << 20


def two_nodes() -> FleetAnswers:
    hot = FakeGpu(util=100, temp=88, power=700, sm_clock=1410, throttle=0x44)
    return FleetAnswers([
        FakeNode("node-a", "10.0.0.1:9400", gpus=[FakeGpu(util=90), FakeGpu(util=50), hot]),
        FakeNode("node-b", "10.0.0.2:9400", gpus=[FakeGpu(fb_used=1024, fb_free=80000)],
                 findings=[{"id": "loader.starvation", "severity": "warning", "gpu": "0",
                            "pid": "4242"}]),
    ])


@contextmanager
def fleet_of(answers: FleetAnswers, **kw: object) -> Iterator[tuple[Fleet, FakePrometheus]]:
    with FakePrometheus(answers) as prom:
        yield Fleet(Prometheus(prom.url), **kw), prom  # type: ignore[arg-type]


def by_name(view: FleetView) -> dict[str, model.Node]:
    return {n.name: n for n in view.nodes}


# -- the model ----------------------------------------------------------------------------------


def test_two_nodes_show_their_gpus_values_and_findings() -> None:
    with fleet_of(two_nodes()) as (fleet, _):
        view = fleet.open()
    a, b = view.nodes
    assert (a.name, b.name) == ("node-a", "node-b")
    assert (a.state, b.state) == (UP, UP)
    assert [g.id for g in a.gpus] == ["0", "1", "2"]
    assert a.util_mean == pytest.approx(80.0) and a.util_max == 100
    assert a.temp_max == 88 and a.power == 650 + 650 + 700
    assert a.mem_used == 3 * 40960 * MiB
    assert a.mem_total == 3 * (40960 + 40000) * MiB  # FB_USED + FB_FREE without FB_TOTAL
    hot = a.gpus[2]
    assert hot.sm_clock == 1410 and hot.model == "NVIDIA H100 80GB HBM3"
    assert hot.throttle == ("sw_power_cap", "hw_thermal")
    assert hot.uuid == "GPU-node-a-0002"
    assert a.scrape_interval == 1.0  # from Prometheus' targets
    assert b.findings and view.findings == b.findings
    f = b.findings[0]
    assert (f.severity, f.gpu, f.pid) == ("warning", "0", "4242")
    assert f.title == "node-b GPU 0: the input pipeline is starving the GPU"
    assert f.detail == "loader.starvation · PID 4242"


def test_a_node_prometheus_cannot_scrape_is_down_with_its_gpus_as_last_seen() -> None:
    answers = two_nodes()
    with fleet_of(answers) as (fleet, _):
        fleet.open()
        answers.nodes[0].up, answers.nodes[0].exporting = False, False
        view = fleet.refresh()
    a = by_name(view)["node-a"]
    assert a.state == DOWN and not a.reporting
    assert "up == 0" in a.why
    assert len(a.gpus) == 3 and a.gpus[2].temp == 88  # as last seen
    assert [n.name for n in view.not_reporting] == ["node-a"]
    assert by_name(view)["node-b"].state == UP


def test_a_node_whose_newest_sample_is_older_than_two_scrape_intervals_is_stale() -> None:
    answers = two_nodes()
    with fleet_of(answers) as (fleet, _):
        fleet.open()
        answers.nodes[1].sample_age = 1.9  # scrape interval 1 s: still fresh
        assert by_name(fleet.refresh())["node-b"].state == UP
        answers.nodes[1].sample_age = 2.1
        b = by_name(fleet.refresh())["node-b"]
    assert b.state == STALE and "no new sample for 2 s" in b.why


# dcgm-exporter run with a counter list of its own: no FB_USED, no GPU_TEMP.
SOME_COUNTERS = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE",
                           "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"})


def test_a_node_without_memory_or_temperature_is_judged_alike_live_and_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    answers = two_nodes()
    answers.nodes[1].metrics = SOME_COUNTERS
    with fleet_of(answers) as (fleet, prom):
        fleet.open()
        for _ in range(5):  # the dashboard, refreshing while the node is scraped as ever
            answers.time += 30
            b = by_name(fleet.refresh())["node-b"]
            assert b.state == UP, b.why
            assert b.last_seen == answers.time - 0.5
            assert main(["fleet", "--prometheus", prom.url, "--once"]) == 0
            assert capsys.readouterr().out.splitlines()[3].split()[:2] == ["node-b", "up"]
        assert b.gpus[0].util == 95 and b.gpus[0].mem_used is None and b.temp_max is None
        # Its samples stop coming: both say STALE.
        answers.nodes[1].sample_age = 2.5
        b = by_name(fleet.refresh())["node-b"]
        assert b.state == STALE and "no new sample for 2 s" in b.why
        assert main(["fleet", "--prometheus", prom.url, "--once"]) == 0
        assert capsys.readouterr().out.splitlines()[3].split()[:2] == ["node-b", "STALE"]


def test_scrape_interval_given_by_the_user_wins_over_the_targets() -> None:
    answers = two_nodes()
    answers.nodes[1].sample_age = 20
    with fleet_of(answers, scrape_interval=15.0) as (fleet, prom):
        view = fleet.open()
    assert by_name(view)["node-b"].state == UP  # 20 s < 2 x 15 s
    assert not any(path == "/api/v1/targets" for path, _ in prom.requests)


def test_without_a_targets_list_the_default_interval_applies() -> None:
    answers = two_nodes()
    answers.targets_api = False  # Thanos, Mimir: no /api/v1/targets
    answers.nodes[1].sample_age = 29
    with fleet_of(answers) as (fleet, _):
        view = fleet.open()
        assert view.nodes[0].scrape_interval == model.DEFAULT_SCRAPE_INTERVAL
        assert by_name(view)["node-b"].state == UP
        answers.nodes[1].sample_age = 31
        assert by_name(fleet.refresh())["node-b"].state == STALE


def test_a_node_whose_target_is_removed_is_gone_then_forgotten_after_an_hour() -> None:
    answers = two_nodes()
    with fleet_of(answers) as (fleet, _):
        fleet.open()
        gone = answers.nodes.pop(0)
        a = by_name(fleet.refresh())["node-a"]
        assert a.state == GONE and "gone from Prometheus" in a.why
        answers.time += model.FORGET_AFTER_S + 10
        answers.nodes[0].sample_age = 0.5
        assert [n.name for n in fleet.refresh().nodes] == ["node-b"]
        answers.nodes.append(gone)  # back: up again
        assert by_name(fleet.refresh())["node-a"].state == UP


def test_an_exporter_that_stops_exporting_gpus_is_flagged() -> None:
    answers = two_nodes()
    with fleet_of(answers) as (fleet, _):
        fleet.open()
        answers.nodes[0].exporting = False  # up, but no DCGM series
        a = by_name(fleet.refresh())["node-a"]
    assert a.state == GONE and "no GPU metrics" in a.why


def test_a_node_back_under_a_new_address_replaces_its_old_row() -> None:
    answers = two_nodes()
    with fleet_of(answers) as (fleet, _):
        fleet.open()
        answers.nodes[0].instance = "10.0.0.99:9400"  # a restarted pod
        view = fleet.refresh()
    assert [(n.name, n.instance, n.state) for n in view.nodes] == [
        ("node-a", "10.0.0.99:9400", UP), ("node-b", "10.0.0.2:9400", UP)]


def test_a_node_already_down_at_start_is_listed_from_the_last_ten_minutes() -> None:
    answers = two_nodes()

    def answer(path: str, params: dict[str, str]) -> tuple[int, object]:
        if params.get("query") == model.VALUES_QUERY:
            answers.nodes[0].up, answers.nodes[0].exporting = False, False
        return answers(path, params)

    with FakePrometheus(answer) as prom:  # type: ignore[arg-type]
        view = Fleet(Prometheus(prom.url)).open()
    a = by_name(view)["node-a"]
    assert a.state == DOWN and len(a.gpus) == 3 and a.last_seen is not None


def test_gputop_that_cannot_read_its_gpus_marks_the_node_down() -> None:
    values = Answer((
        Sample({"__name__": "up", "job": "j", "instance": "i"}, 1.0),
        Sample({"__name__": "gputop_up", "job": "j", "instance": "i", "Hostname": "h"}, 0.0),
        Sample({"__name__": "DCGM_FI_DEV_GPU_UTIL", "job": "j", "instance": "i",
                "Hostname": "h", "gpu": "0"}, 50.0),
    ), 100.0)
    (node,) = build_nodes(values, None, now=100.0)
    assert node.state == DOWN and "gputop_up == 0" in node.why


def test_mig_memory_is_summed_over_instances_and_counts_one_gpu() -> None:
    base = {"job": "j", "instance": "i", "Hostname": "h", "gpu": "0", "UUID": "GPU-x"}
    values = Answer((
        Sample({"__name__": "DCGM_FI_DEV_FB_USED", **base, "GPU_I_ID": "1"}, 1000.0),
        Sample({"__name__": "DCGM_FI_DEV_FB_USED", **base, "GPU_I_ID": "2"}, 3000.0),
        Sample({"__name__": "DCGM_FI_DEV_FB_TOTAL", **base, "GPU_I_ID": "1"}, 40000.0),
        Sample({"__name__": "DCGM_FI_DEV_FB_TOTAL", **base, "GPU_I_ID": "2"}, 40000.0),
        Sample({"__name__": "DCGM_FI_DEV_GPU_TEMP", **base}, 45.0),
    ), 100.0)
    (node,) = build_nodes(values, None, now=100.0)
    (gpu,) = node.gpus
    assert (gpu.mem_used, gpu.mem_total) == (4000 * MiB, 80000 * MiB)
    assert gpu.temp == 45 and gpu.mig_instances == 2


def test_dcgm_blank_values_and_nan_are_no_value() -> None:
    assert gauge(9223372036854775794.0) is None  # DCGM's int64 "not supported" sentinel
    assert gauge(float(2**47)) is None  # its fp64 blank
    assert gauge(float("nan")) is None and gauge(-1.0) is None
    assert gauge(0.0) == 0.0 and gauge(15109.0) == 15109.0


def parse_scrape(text: str, job: str, instance: str) -> list[Sample]:
    from prometheus_client.parser import text_string_to_metric_families

    return [Sample({"__name__": s.name, **s.labels, "job": job, "instance": instance}, s.value)
            for family in text_string_to_metric_families(text) for s in family.samples]


def test_a_real_dcgm_exporter_scrape_reads_with_its_label_spellings() -> None:
    """Two Tesla T4 hosts (drivers 460 and 470) as dcgm-exporter labels them. The PROF_* lines
    without labels (dummy values in the fixture) name no GPU, and the A10G line is only
    DCGM_FI_PROF_DRAM_ACTIVE, which the fleet does not read."""
    samples = parse_scrape(T4_SCRAPE.read_text(), "dcgm", "10.1.2.3:9400")
    nodes = {n.name: n for n in build_nodes(Answer(tuple(samples), 1.0), None, now=1.0)}
    t4 = nodes["424773df46e0"]
    (gpu,) = t4.gpus
    assert gpu.model == "Tesla T4" and gpu.uuid == "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
    assert (gpu.util, gpu.temp, gpu.sm_clock) == (0, 25, 300)
    assert gpu.power == pytest.approx(8.969)
    assert (gpu.mem_used, gpu.mem_total) == (0, 15109 * MiB)
    other = nodes["551bdf382151"].gpus[0]
    assert other.throttle == ("gpu_idle",)  # CLOCK_THROTTLE_REASONS 1
    assert other.mem_total == 15109 * MiB  # FB_TOTAL
    assert set(nodes) == {"424773df46e0", "551bdf382151"}


# -- the server at start, and later --------------------------------------------------------------


@pytest.mark.parametrize("url", ["ftp://prom:9090", "http://", "http://prom:notaport",
                                 "http://prom:9090/?q=1"])
def test_a_bad_url_is_one_line(url: str) -> None:
    with pytest.raises(GputopError) as e:
        normalize_url(url)
    assert "\n" not in str(e.value)


def test_a_bare_host_and_port_means_http() -> None:
    assert normalize_url("prom:9090/") == "http://prom:9090"
    assert normalize_url("https://prom.example/prometheus/") == "https://prom.example/prometheus"


def test_nothing_listening_is_one_line_at_start(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert main(["fleet", "--prometheus", f"127.0.0.1:{port}", "--once"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"gputop: cannot reach Prometheus at http://127.0.0.1:{port}")
    assert "connection refused" in err


@pytest.mark.parametrize(("reply", "words"), [
    ((200, b"<html>Grafana</html>"), "does not look like Prometheus"),
    ((404, b"404 page not found"), "does not look like Prometheus: /api/v1/query gave HTTP 404"),
    ((200, {"status": "success", "data": {"resultType": "matrix", "result": []}}),
     "unexpected result"),
    (error("bad_data", "parse error\x1b[31m"), "refused /api/v1/query (bad_data): parse error"),
])
def test_a_server_that_is_not_prometheus_is_one_line_at_start(
        reply: tuple[int, object], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    with FakePrometheus(lambda path, params: reply) as prom:  # type: ignore[arg-type,return-value]
        assert main(["fleet", "--prometheus", prom.url, "--once"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err
    assert "\x1b" not in err  # the server's text is printable


def test_a_failure_during_the_run_keeps_the_last_nodes_and_says_why() -> None:
    answers = two_nodes()
    with fleet_of(answers) as (fleet, _):
        before = fleet.open()
    view = fleet.refresh()  # the server is gone
    assert view.nodes == before.nodes and view.time == before.time
    assert view.error.startswith("cannot reach Prometheus")


def test_user_and_password_in_the_url_are_sent_and_never_shown() -> None:
    with FakePrometheus(two_nodes()) as prom:
        url = prom.url.replace("http://", "http://ops:s%3Acret@")
        client = Prometheus(url)
        client.query("vector(1)")
    assert client.url == prom.url and "cret" not in client.url
    assert prom.headers[-1]["Authorization"] == "Basic b3BzOnM6Y3JldA=="  # ops:s:cret


def test_once_prints_the_fleet_as_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    answers = two_nodes()
    answers.nodes[1].up, answers.nodes[1].exporting = False, True
    with FakePrometheus(answers) as prom:
        assert main(["fleet", "--prometheus", prom.url, "--once"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "2 nodes, 4 GPUs, 1 not reporting" in out[0]
    assert out[1].split() == ["NODE", "STATE", "GPUS", "UTIL", "avg/max", "MEMORY", "TEMP",
                              "POWER", "FINDINGS", "AGE"]
    assert out[2].split()[:5] == ["node-a", "up", "3", "80%/100%", "120/237G"]
    assert out[3].split()[:3] == ["node-b", "DOWN", "1"]
    assert any("Prometheus cannot scrape it" in line for line in out)


# -- the screens --------------------------------------------------------------------------------


def cell_text(table: object, row: str, column: str) -> str:
    cell = table.get_cell(row, column)  # type: ignore[attr-defined]
    assert isinstance(cell, Text)
    return cell.plain


async def test_the_fleet_screen_lists_nodes_and_enter_shows_a_nodes_gpus() -> None:
    with fleet_of(two_nodes()) as (fleet, _):
        view = fleet.open()
    app = FleetApp(None, view=view, url="http://prom:9090")
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.fleet_screen.table
        keys = [r.key.value for r in table.ordered_rows]
        assert keys == ["dcgm\x1f10.0.0.1:9400\x1fnode-a", "dcgm\x1f10.0.0.2:9400\x1fnode-b"]
        assert cell_text(table, keys[0], "util") == "80%/100%"
        assert cell_text(table, keys[0], "temp") == "88°C"
        assert cell_text(table, keys[1], "findings") == "▲ 1"
        assert "starving" in str(app.fleet_screen.findings.render())
        await pilot.press("down", "enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, NodeScreen) and screen.key[2] == "node-b"
        assert cell_text(screen.table, "0", "mem") == "1.0/79.1 GiB"
        # the next refresh reaches the open node screen too
        node_b = replace(view.nodes[1], state=DOWN, why="Prometheus cannot scrape it")
        app.apply_view(replace(view, nodes=(view.nodes[0], node_b)))
        await pilot.pause()
        assert "DOWN" in str(screen.header.render())
        await pilot.press("escape")
        assert app.screen is app.fleet_screen
        assert cell_text(table, keys[1], "state") == f"{CROSS} DOWN"
        assert cell_text(table, keys[1], "util") == "-"


async def test_a_failed_refresh_is_shown_in_the_header_not_raised() -> None:
    with fleet_of(two_nodes()) as (fleet, _):
        view = fleet.open()
    app = FleetApp(None, view=view, url="http://prom:9090")
    async with app.run_test(size=(80, 24)) as pilot:
        app.apply_view(replace(view, error="cannot reach Prometheus at http://prom:9090"))
        await pilot.pause()
        header = str(app.fleet_screen.header.render())
        assert "PROMETHEUS" in header and "cannot reach Prometheus" in header
        table = app.fleet_screen.table
        assert len(table.ordered_rows) == 2
        # 80 columns: power gives its room to the rest; it comes back when there is room
        assert [c.value for c in table.columns] == ["node", "state", "gpus", "util", "mem",
                                                    "temp", "findings", "seen"]
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert "power" in [c.value for c in table.columns]
        assert cell_text(table, "dcgm\x1f10.0.0.1:9400\x1fnode-a", "power") == "2000 W"


async def test_hostile_label_values_are_shown_as_text() -> None:
    evil = "[bold red]pwn[/]\x1b]0;owned\x07\x1f"
    answers = FleetAnswers([FakeNode(evil, "10.0.0.1:9400",
                                     gpus=[FakeGpu(model="[link=http://x]H100[/link]")])])
    with fleet_of(answers) as (fleet, _):
        view = fleet.open()
    app = FleetApp(None, view=view, url="http://prom:9090")
    async with app.run_test(size=(120, 40)) as pilot:
        (row,) = app.fleet_screen.table.ordered_rows
        name = cell_text(app.fleet_screen.table, row.key.value, "node")  # type: ignore[arg-type]
        assert name == "[bold red]pwn[/]\\x1b]0;owned\\x07\\x1f"
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, NodeScreen) and screen.key[2] == evil
        assert cell_text(screen.table, "0", "model") == "[link=http://x]H100[/link]"
        assert "\x1b" not in str(screen.header.render())


async def test_the_app_refreshes_in_the_background_and_r_refreshes_now() -> None:
    answers = two_nodes()
    with fleet_of(answers) as (fleet, _):
        app = FleetApp(fleet, view=fleet.open(), interval=60)
        async with app.run_test(size=(120, 40)) as pilot:
            answers.nodes[0].up, answers.nodes[0].exporting = False, False
            await pilot.press("r")
            for _ in range(100):
                await pilot.pause(0.02)
                if app.view.not_reporting:
                    break
            assert [n.name for n in app.view.not_reporting] == ["node-a"]
            assert app.refresh_seconds  # the refresh ran in a thread and was timed


async def test_a_bug_in_a_refresh_is_shown_and_the_refreshes_go_on() -> None:
    class Broken:
        url = "http://prom:9090"
        calls = 0

        def refresh(self) -> FleetView:
            self.calls += 1
            raise RuntimeError("boom")

    fleet = Broken()
    app = FleetApp(fleet, view=FleetView(), interval=0.01)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(100):
            await pilot.pause(0.02)
            if fleet.calls >= 2:
                break
        assert fleet.calls >= 2
        assert "refresh failed: RuntimeError: boom" in str(app.fleet_screen.header.render())


# -- a real Prometheus ---------------------------------------------------------------------------

SCRAPE_S = 1.0
real = pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed "
                          "(Debian/Ubuntu: apt-get install prometheus)")


@contextmanager
def real_fleet(tmp: Path) -> Iterator[tuple[str, dict[str, subprocess.Popen[str]]]]:
    """Prometheus scraping node-a (the demo: 8 H100s in training) and node-b (a recording of two
    idle-valued synthetic H100s) every second."""
    from gputop.recording import RecordingWriter
    from gputop.report.summary import SummaryKeeper
    from gputop.testing import synthetic

    recording = tmp / "node-b.gputop"
    with RecordingWriter(recording, summarizer=SummaryKeeper()) as w:
        for t in range(30):
            w.write(synthetic.node(2, time=1_800_000_000.0 + t, processes=False))
    exporters: dict[str, subprocess.Popen[str]] = {}
    try:
        exporters["node-a"], port_a = serve("--demo", "--hostname", "node-a")
        exporters["node-b"], port_b = serve("--replay", str(recording), "--hostname", "node-b")
        with prometheus(tmp, [port_a, port_b], scrape_s=SCRAPE_S) as url:
            yield url, exporters
    finally:
        for proc in exporters.values():
            stop(proc)


def wait_for_both(url: str) -> tuple[Fleet, FleetView]:
    """Prometheus starts, finds its targets (up to 5 s: its discovery cadence), scrapes them."""
    deadline = time.monotonic() + 20
    last: object = None
    while time.monotonic() < deadline:
        try:
            fleet = Fleet(Prometheus(url, timeout=2))
            view = fleet.open()
        except PrometheusError as e:
            last = e
        else:
            last = [(n.name, n.state, len(n.gpus)) for n in view.nodes]
            if last == [("node-a", UP, 8), ("node-b", UP, 2)]:
                return fleet, view
        time.sleep(0.2)
    raise AssertionError(f"Prometheus did not show both nodes within 20 s: {last}")


@real
async def test_real_prometheus_two_nodes_then_one_stops_and_is_flagged(tmp_path: Path) -> None:
    import asyncio

    with real_fleet(tmp_path) as (url, exporters):
        fleet, view = await asyncio.to_thread(wait_for_both, url)
        a, b = view.nodes
        assert a.scrape_interval == b.scrape_interval == SCRAPE_S  # read from the targets
        assert {g.model for g in a.gpus} == {"NVIDIA H100 80GB HBM3"}
        assert all(g.util is not None and g.temp is not None and g.power is not None
                   for g in a.gpus)
        assert [g.id for g in b.gpus] == ["0", "1"]
        for g in b.gpus:  # what the recording holds, through gputop serve and Prometheus
            assert (g.util, g.temp, g.power, g.sm_clock) == (95, 55, 640, 1515)
            assert g.mem_used == 10 * 1024 * MiB
            assert g.mem_total == 85520809984 // MiB * MiB  # whole MiB, as DCGM
            assert g.throttle == ("sw_power_cap",)
        assert b.last_seen is not None and view.time - b.last_seen <= 2 * SCRAPE_S

        app = FleetApp(Fleet(Prometheus(url)), view=view, url=url, interval=0.2)
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.fleet_screen.table
            rows = {k.split("\x1f")[2]: k for k in (r.key.value for r in table.ordered_rows)}
            assert cell_text(table, rows["node-a"], "gpus") == "8"
            assert cell_text(table, rows["node-b"], "util") == "95%/95%"
            await pilot.press("down", "enter")
            await pilot.pause()
            assert isinstance(app.screen, NodeScreen)
            assert cell_text(app.screen.table, "1", "sm") == "1515"
            await pilot.press("escape")

            stop(exporters["node-b"])
            stopped = time.time()
            # Every refresh evaluated (by Prometheus' clock) two scrape intervals or more after
            # the exporter stopped must flag the node.
            while True:
                view = await asyncio.to_thread(fleet.refresh)
                assert not view.error
                state = by_name(view)["node-b"].state
                if state != UP:
                    break
                assert view.time is not None and view.time < stopped + 2 * SCRAPE_S, \
                    "node-b still reported up two scrape intervals after its exporter stopped"
                await asyncio.sleep(0.05)
            assert state == DOWN and by_name(view)["node-a"].state == UP
            # ... and the app, refreshing on its own, shows it.
            for _ in range(100):
                if cell_text(table, rows["node-b"], "state") == f"{CROSS} DOWN":
                    break
                await pilot.pause(0.05)
            assert cell_text(table, rows["node-b"], "state") == f"{CROSS} DOWN"
            assert "1 not reporting" in str(app.fleet_screen.header.render())


def test_the_fleet_model_does_not_import_textual() -> None:
    code = ("import sys, gputop.fleet.model, gputop.fleet.promql, gputop.commands.fleet\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_fleet_help_names_the_prometheus_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["fleet", "--help"])
    assert "--prometheus URL" in capsys.readouterr().out
