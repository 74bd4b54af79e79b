"""GputopApp: the live dashboard over any feed of Snapshots.

The screens other than the dashboard are imported when first opened: the dashboard's first frame
does not wait for them.

The feed (the NVML poller, a recording) has `stream(interval)`, an async iterator that keeps its
blocking calls off the event loop. One long-lived worker consumes it and applies each Snapshot
inside `batch_update()`, so a tick is one repaint. Tests call `apply_snapshot` directly."""

from __future__ import annotations

import gputop.ui.no_tls  # noqa: F401  first: asyncio without OpenSSL (see there)

# isort: split
import asyncio
import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from textual.app import App
from textual.binding import Binding
from textual.driver import Driver
from textual.widgets import Input

from gputop.feeds import Feed, settle_gc
from gputop.model import DeviceSample, ProcessSample, Snapshot
from gputop.ui import textual_private
from gputop.ui.messages import DetailRequested, KillRequested, Say, TopologyRequested
from gputop.ui.screens.dashboard import APP_ACTIONS, DashboardScreen
from gputop.ui.text import sanitize
from gputop.ui.theme import apply_theme
from gputop.ui.view.history import GpuHistory
from gputop.ui.view.keys import APP_KEYS, REPLAY_KEYS, Key
from gputop.ui.view.kill import KillPolicy, Terminator
from gputop.ui.widgets.status_header import ENDED, FAILED

if TYPE_CHECKING:
    from gputop.replay.control import HistoryEdit, ReplayFeed


# Seconds after start when what start-up built is set aside from the garbage collector.
SETTLE_AFTER_S = 5.0

OUTCOMES = {
    "gone": "PID {pid} had already exited",
    "reused": "PID {pid} now belongs to another process: nothing sent",
    "denied": "not allowed to signal PID {pid}",
    "exited": "PID {pid} exited",
    "killed": "PID {pid} did not exit after SIGTERM: sent SIGKILL",
}


def _replay_binding(k: Key) -> Binding:
    # Home and End are taken before the process list (which would go to its first or last row).
    priority = k.action == "replay_jump(0)" or k.action == "replay_jump(1)"
    return Binding(k.keys, k.action or "", k.description, show=k.show, priority=priority,
                   group=Binding.Group(k.group) if k.group else None)


class GputopApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "gputop"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        # Ctrl-C quits, as in htop and nvitop (Textual's default only says to press Ctrl-Q).
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        *(Binding(k.keys, k.action, k.description, show=k.show)
          for k in APP_KEYS if k.action in APP_ACTIONS),
        *(_replay_binding(k) for k in REPLAY_KEYS),
    ]

    def __init__(self, feed: Feed | None, *, interval: float = 1.0, readonly: bool = False,
                 mouse: bool = True, ansi: bool = False, theme: str | None = None,
                 layout: str | None = None, title_suffix: str = "",
                 clock: Callable[[], float] = time.time, table_interval: float = 2.0,
                 kill_policy: KillPolicy | None = None,
                 terminator: Terminator | None = None, replay: ReplayFeed | None = None) -> None:
        """`replay`: the feed of `gputop replay`, whose keys then work (it is also `feed`).
        `theme`: a theme name or alias (ui/theme.py); `layout`: compact or cards (None: auto)."""
        # ansi_color must be known at construction: it picks the NO_COLOR filter that keeps the
        # terminal's own 16 colours (instead of a greyscale conversion of RGB).
        super().__init__(ansi_color=True if ansi else None)
        textual_private.install()  # a repaint sends the cells that changed, not whole lines
        apply_theme(self, theme, ansi)
        if "TEXTUAL_ANIMATIONS" not in os.environ:
            self.animation_level = "none"  # nothing here needs animating, least of all over SSH
        self.feed = feed
        self.interval = interval
        self.readonly = readonly
        self.mouse = mouse
        self.clock = clock
        self.kill_policy = kill_policy or KillPolicy.for_current_user(readonly=readonly)
        if readonly and not self.kill_policy.readonly:
            self.kill_policy = KillPolicy(self.kill_policy.euid, self.kill_policy.username, True)
        self.terminator = terminator or Terminator()
        self.histories: dict[int, GpuHistory] = {}
        self.snapshot: Snapshot | None = None
        self.messages: deque[str] = deque(maxlen=50)  # what was said to the user, newest last
        self.replay = replay
        if replay is not None:
            replay.view = self
        screen = DashboardScreen
        if replay is not None:
            from gputop.ui.screens.replay import ReplayDashboardScreen

            screen = ReplayDashboardScreen
        self.dashboard = screen(clock=clock, interval=interval, suffix=title_suffix,
                                table_interval=table_interval, histories=self.histories,
                                position=replay.status if replay else None,
                                readonly=self.kill_policy.readonly)
        self.dashboard.layout_override = layout
        self.dashboard.findings.times = replay is not None

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver for this terminal; on Linux and macOS one whose input thread
        sleeps until there is input (textual_private.quiet_linux_driver)."""
        base = super().get_driver_class()
        quiet = textual_private.quiet_linux_driver(base)
        return quiet if quiet is not None else base

    def get_default_screen(self) -> DashboardScreen:
        return self.dashboard

    def run(self, *, mouse: bool | None = None, **kwargs: Any) -> Any:
        """`App.run`, with mouse support from the constructor unless given here."""
        return super().run(mouse=self.mouse if mouse is None else mouse, **kwargs)

    def on_mount(self) -> None:
        if self.replay is not None and self.replay.warning:
            self.add_warning(self.replay.warning)
        if self.feed is not None:
            self.run_worker(self._consume(), name="feed", group="feed", exclusive=True,
                            exit_on_error=False)
        if not self.is_headless:  # tests run many apps in one process: they call settle
            self.set_timer(SETTLE_AFTER_S, self.settle)

    def settle(self) -> None:
        """Start-up is over (feeds.settle_gc)."""
        settle_gc()

    async def _consume(self) -> None:
        assert self.feed is not None
        try:
            async for snap in self.feed.stream(self.interval):
                self.apply_snapshot(snap)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # shown on screen; the last data stays up, marked as stale
            self.dashboard.feed_state = FAILED
            self.dashboard.add_warning(f"data feed stopped: {e}")
            return
        self.dashboard.feed_state = ENDED
        self.dashboard.add_warning("the recording has ended")
        if self.snapshot is not None:
            self.dashboard.apply_snapshot(self.snapshot, force_table=True)

    # -- the public surface ---------------------------------------------------------------------

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Show one Snapshot: histories first, then the visible screen, in one repaint."""
        self.snapshot = snap
        for d in snap.devices:
            history = self.histories.get(d.index)
            if history is None:
                history = self.histories[d.index] = GpuHistory()
            history.push(d)
        with self.batch_update():
            self.dashboard.apply_snapshot(snap)
            screen = self.screen
            if screen is not self.dashboard and hasattr(screen, "apply_snapshot"):
                screen.apply_snapshot(snap)

    def set_findings(self, findings: Iterable[Any]) -> None:
        """Show diagnostics findings (objects with .severity, .title, .detail); [] hides them."""
        self.dashboard.set_findings(findings)
        if self.replay is not None:
            self.dashboard.refresh_header()  # no longer "diagnosing"

    def add_warning(self, text: str) -> None:
        """A warning line of the app's own, above the snapshot's."""
        self.dashboard.add_warning(text)

    def edit_history(self, edit: HistoryEdit) -> None:
        """A replay moved other than one tick forward: make the graphs lead up to where it is."""
        if edit.clear or edit.drop:
            for kept in self.histories.values():
                kept.drop(None if edit.clear else edit.drop)
        for devices in edit.push:
            for d in devices:
                history = self.histories.get(d.index)
                if history is None:
                    history = self.histories[d.index] = GpuHistory()
                history.push(d)
        if edit.prepend:
            older: dict[int, list[DeviceSample]] = {}
            for devices in edit.prepend:
                for d in devices:
                    older.setdefault(d.index, []).append(d)
            for index, samples in older.items():
                if index in self.histories:
                    self.histories[index].prepend(samples)
            if self.snapshot is not None:
                self.dashboard.apply_snapshot(self.snapshot)  # redraw the graphs

    def say(self, message: str, severity: str = "information") -> None:
        """Tell the user something, as text (never markup)."""
        text = sanitize(message, 400)
        self.messages.append(text)
        self.notify(text, severity=severity, markup=False)  # type: ignore[arg-type]

    # -- what the screens ask -------------------------------------------------------------------

    def on_say(self, message: Say) -> None:
        self.say(message.text, message.severity)

    def on_kill_requested(self, message: KillRequested) -> None:
        self.request_kill(message.proc)

    def on_detail_requested(self, message: DetailRequested) -> None:
        self.open_detail(message.index)

    def on_topology_requested(self, message: TopologyRequested) -> None:
        self.open_topology()

    # -- views ----------------------------------------------------------------------------------

    def action_help(self) -> None:
        from gputop.ui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(replay=self.replay is not None))

    # -- replay ---------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action.startswith("replay_"):
            if self.replay is None:
                return False  # not bound, not in the footer
            if action == "replay_jump" and isinstance(self.focused, Input):
                return False  # Home and End move the cursor of a text field
        return True

    def action_replay_pause(self) -> None:
        self._replay_moved(lambda c: c.toggle_pause())

    def action_replay_step(self, n: int) -> None:
        self._replay_moved(lambda c: c.step(n))

    def action_replay_speed(self, step: int) -> None:
        self._replay_moved(lambda c: c.faster() if step > 0 else c.slower())

    def action_replay_jump(self, end: int) -> None:
        self._replay_moved(lambda c: c.to_end() if end else c.to_start())

    def action_replay_seek(self) -> None:
        from gputop.ui.screens.replay import SeekScreen

        replay = self.replay
        if replay is None or isinstance(self.screen, SeekScreen):
            return

        def chosen(tick: int | None) -> None:
            if tick is not None:
                self._replay_moved(lambda c: c.seek(tick))

        self.push_screen(SeekScreen(replay.control), chosen)

    def _replay_moved(self, change: Callable[[Any], None]) -> None:
        if self.replay is None:
            return
        change(self.replay.control)
        self.replay.wake()
        self.dashboard.refresh_header()

    def open_detail(self, index: int) -> None:
        from gputop.ui.screens.detail import DetailScreen

        screen = DetailScreen(index, self.histories)
        self.push_screen(screen)
        if self.snapshot is not None:
            screen.apply_snapshot(self.snapshot)

    def open_topology(self) -> None:
        from gputop.ui.screens.topology import TopologyScreen

        screen = TopologyScreen()
        self.push_screen(screen)
        if self.snapshot is not None:
            screen.call_after_refresh(screen.apply_snapshot, self.snapshot)

    # -- killing --------------------------------------------------------------------------------

    def request_kill(self, proc: ProcessSample) -> None:
        refusal = self.kill_policy.refusal(proc)
        if refusal:
            self.say(refusal, "warning")
            return

        def confirmed(kill: bool | None) -> None:
            if kill:
                self.run_worker(self._terminate(proc), group="kill", exit_on_error=False)
            else:
                self.say(f"PID {proc.pid} left running")

        from gputop.ui.screens.kill import KillScreen

        self.push_screen(KillScreen(proc, self.terminator.grace), confirmed)

    async def _terminate(self, proc: ProcessSample) -> str:
        outcome = await self.terminator.terminate(proc, self.say)
        self.say(OUTCOMES[outcome].format(pid=proc.pid),
                 "information" if outcome in ("exited", "killed", "gone") else "warning")
        return outcome

