"""What htop, nvitop and gpustat users' fingers do: Ctrl-C quits every dashboard (the monitor,
replay, fleet) and `?` opens the help, in the fleet too."""

from __future__ import annotations

from gputop.fleet.model import FleetView
from gputop.ui.fleet import FleetApp
from gputop.ui.screens.help import HelpScreen
from tests.helpers.ui import make_app, node, screen_text, show


async def test_ctrl_c_quits_the_dashboard() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0  # quitting, not a toast saying to press Ctrl-Q
        assert not any("ctrl+q" in m.lower() for m in app.messages)


async def test_ctrl_c_quits_from_the_filter_and_from_a_view() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("slash", "x")  # typing in the process filter
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, [node(0)])
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0


async def test_ctrl_c_quits_the_fleet_and_question_mark_opens_its_help() -> None:
    app = FleetApp(None, view=FleetView(), url="http://prom:9090")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        assert "gputop fleet help" in text and "ask Prometheus again now" in text
        assert "on a node: its GPUs and Findings" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0
