"""The top line: what is being watched, with which driver, and how fresh the data is.

    gputop  node-a17  driver 580.65.06 · CUDA 13.0  CPU 41% RAM 312/1008G   12:34:56 ● live

The time is the data's own (when the snapshot was taken), not a wall clock: a clock that keeps
ticking would hide a stuck poll. The age is recomputed every second from the snapshot's time,
so a stale or stuck poll shows as "▲ STALE data 12 s old"; while data is fresh the line
changes only when a snapshot arrives, so the header costs no extra repaint."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from textual.content import Content

from gputop.model import Snapshot, value
from gputop.ui.text import safe_content
from gputop.ui.view import format as fmt
from gputop.ui.view import styles
from gputop.ui.view.status import CROSS
from gputop.ui.widgets.text_line import TextLine

WAITING = "waiting"
LIVE = "live"
ENDED = "ended"
FAILED = "failed"


def stale_after(interval: float) -> float:
    """Seconds after which data counts as stale: a few missed ticks, never less than 3 s."""
    return max(3.0, 3 * interval)


def freshness(snap: Snapshot | None, now: float, interval: float, state: str,
              started: float) -> Content:
    """The data-age badge: a glyph, a word, and the age once it matters."""
    if snap is None:
        waited = fmt.age(now - started)
        if state == FAILED:
            return Content.assemble((f" {CROSS} NO DATA ", styles.badge_style("critical")))
        return Content.assemble(("○ waiting for the first poll", styles.MUTED),
                                (f" {waited}", styles.MUTED))
    age = now - snap.time
    old = f" data {fmt.age(age)} old"
    if state == FAILED:
        return Content.assemble((f" {CROSS} FEED FAILED ", styles.badge_style("critical")), old)
    if state == ENDED:
        return Content.assemble((" ■ ENDED ", styles.badge_style("info")), old)
    if age > stale_after(interval):
        severity = "critical" if age > 10 * stale_after(interval) else "warning"
        word = " ▲ STUCK " if severity == "critical" else " ▲ STALE "
        return Content.assemble((word, styles.badge_style(severity)),
                                (old, styles.text_style(severity)))
    return Content.assemble(("● ", styles.OK), ("live", styles.LABEL))


@lru_cache(maxsize=16)
def _identity(suffix: str, host: str | None, driver: str | None, cuda: str | None,
              rocm: str | None) -> tuple[Content, tuple[Content, ...]]:
    """The part of the line that stays while the dashboard runs: its name, the host and the
    driver's versions, made once (the line is made again every tick)."""
    left = Content.assemble(("gputop", "bold $accent"), safe_content(suffix, styles.LABEL))
    parts: list[Content] = []
    if host:
        parts.append(safe_content(host, "bold"))
    versions = []
    if driver:
        versions.append(Content.assemble(("driver ", styles.LABEL), safe_content(driver)))
    if cuda:
        versions.append(Content.assemble(("CUDA ", styles.LABEL), safe_content(cuda)))
    if rocm:
        versions.append(Content.assemble(("ROCm ", styles.LABEL), safe_content(rocm)))
    if versions:
        parts.append(Content(" · ").stylize(styles.LABEL).join(versions))
    return left, tuple(parts)


def header_content(snap: Snapshot | None, now: float, width: int, *, interval: float,
                   state: str, started: float, suffix: str = "",
                   position: str | None = None) -> Content:
    """`position` replaces the time and the data age: a replay says where it is in the
    recording, and a recording's data is as old as it is."""
    if position is not None:
        right = Content(position)
    else:
        shown = now if snap is None else snap.time
        right = Content.assemble((fmt.clock_time(shown), ""), "  ",
                                 freshness(snap, now, interval, state, started))
    parts: list[Content] = []
    if snap is not None:
        sysinfo = snap.system
        left, named = _identity(suffix, sysinfo.hostname or snap.host.hostname,
                                value(sysinfo.driver_version), value(sysinfo.cuda_version),
                                value(sysinfo.rocm_version))
        parts += named
        h = snap.host
        stats = []
        cpu = value(h.cpu_percent)
        if cpu is not None:
            stats.append(Content.assemble(("CPU ", styles.LABEL), f"{cpu:.0f}%"))
        used, total = value(h.mem_used), value(h.mem_total)
        if used is not None and total is not None:
            stats.append(Content.assemble(("RAM ", styles.LABEL),
                                          f"{fmt.gib(used)}/{fmt.gib(total)}G"))
        load = value(h.load_avg)
        if load:
            stats.append(Content.assemble(("load ", styles.LABEL), f"{load[0]:.1f}"))
        if stats:
            parts.append(Content(" ").join(stats))
    else:
        left = _identity(suffix, None, None, None, None)[0]
    # Drop the least important parts until the line fits; the freshness badge always stays.
    return fit_line(left, parts, right, width)


def fit_line(left: Content, parts: list[Content], right: Content, width: int) -> Content:
    """`left` and as many of `parts` as fit (the last dropped first), two spaces apart, and
    `right` against the right edge of `width` cells, at least a space after the rest; cut at
    `width`. Measured part by part and put together once: a Content made of the whole line (a
    join, a sum) scans all its text again for control codes, which its parts were cleared of."""
    parts = list(parts)
    length = left.cell_length + sum(2 + p.cell_length for p in parts)
    while parts and length + 2 + right.cell_length > width:
        length -= 2 + parts.pop().cell_length
    gap = max(1, width - length - right.cell_length)
    pieces: list[Content | str] = [left]
    for p in parts:
        pieces += ["  ", p]
    pieces += [" " * gap, right]
    return Content.assemble(*pieces, strip_control_codes=False).truncate(width)


class StatusHeader(TextLine):
    repaints_now = True
    DEFAULT_CSS = """
    StatusHeader {
        background: $panel;
        padding: 0 1;
    }
    """

    def __init__(self, clock: Callable[[], float], interval: float, suffix: str = "", *,
                 position: Callable[[float], str] | None = None, id: str | None = None) -> None:
        super().__init__(id=id)
        self._position = position
        self._clock = clock
        self._interval = interval
        self._suffix = suffix
        self._snapshot: Snapshot | None = None
        self._state = WAITING
        self._started = clock()
        self._shown_snapshot: Snapshot | None = None  # what the line was last built from
        self._shown: object = None

    def on_mount(self) -> None:
        self.set_interval(1.0, self.tick)

    @property
    def state(self) -> str:
        return self._state

    def set_snapshot(self, snap: Snapshot) -> None:
        self._snapshot = snap
        if self._state == WAITING:
            self._state = LIVE
        self.tick()

    def set_state(self, state: str) -> None:
        self._state = state
        self.tick()

    def tick(self) -> None:
        """Recompute the line (clock, age); repaint only if it changed. Between snapshots only
        the time-dependent part can change (the data-age badge, a replay's position, the clock
        while waiting): the rest of the line is rebuilt only when that part moved."""
        now = self._clock()
        width = self.size.width or 80
        position = self._position(now) if self._position else None
        moving: object = position
        if position is None:
            badge = freshness(self._snapshot, now, self._interval, self._state, self._started)
            moving = (badge.plain, tuple(badge.spans),
                      fmt.clock_time(now) if self._snapshot is None else None)
        key = (width, self._state, moving)
        if self._snapshot is self._shown_snapshot and key == self._shown:
            return
        self._shown_snapshot, self._shown = self._snapshot, key
        self.set(header_content(self._snapshot, now, width, interval=self._interval,
                                state=self._state, started=self._started, suffix=self._suffix,
                                position=position))

    def on_resize(self) -> None:
        self.tick()
