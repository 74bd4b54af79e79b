"""The top line: what is being watched, with which driver, and how fresh the data is.

    gputop  node-a17  driver 580.65.06 · CUDA 13.0  CPU 41% RAM 312/1008G   12:34:56 ● live

The time is the data's own (when the snapshot was taken), not a wall clock: a clock that keeps
ticking would hide a stuck poll. The age is recomputed every second from the snapshot's time,
so a stale or stuck poll shows as "▲ STALE data 12 s old"; while data is fresh the line
changes only when a snapshot arrives, so the header costs no extra repaint."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from rich.cells import cell_len
from textual.content import Content

from gputop.model import Snapshot, value
from gputop.ui.text import sanitize
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


# A piece of the line: its text and its style text (as in `Content.assemble`).
Part = tuple[str, str]


def freshness_parts(snap: Snapshot | None, now: float, interval: float, state: str,
                    started: float) -> tuple[Part, ...]:
    """The data-age badge as parts (`freshness`)."""
    if snap is None:
        waited = fmt.age(now - started)
        if state == FAILED:
            return ((f" {CROSS} NO DATA ", styles.badge_style("critical")),)
        return ("○ waiting for the first poll", styles.MUTED), (f" {waited}", styles.MUTED)
    age = now - snap.time
    old = f" data {fmt.age(age)} old"
    if state == FAILED:
        return (f" {CROSS} FEED FAILED ", styles.badge_style("critical")), (old, "")
    if state == ENDED:
        return (" ■ ENDED ", styles.badge_style("info")), (old, "")
    if age > stale_after(interval):
        severity = "critical" if age > 10 * stale_after(interval) else "warning"
        word = " ▲ STUCK " if severity == "critical" else " ▲ STALE "
        return (word, styles.badge_style(severity)), (old, styles.text_style(severity))
    return ("● ", styles.OK), ("live", styles.LABEL)


def freshness(snap: Snapshot | None, now: float, interval: float, state: str,
              started: float) -> Content:
    """The data-age badge: a glyph, a word, and the age once it matters."""
    return Content.assemble(*freshness_parts(snap, now, interval, state, started))


@lru_cache(maxsize=16)
def _identity(suffix: str, host: str | None, driver: str | None, cuda: str | None,
              rocm: str | None) -> tuple[tuple[Part, ...], tuple[tuple[Part, ...], ...]]:
    """The part of the line that stays while the dashboard runs: its name, the host and the
    driver's versions, made once (the line is made again every tick)."""
    left = (("gputop", "bold $accent"), (sanitize(suffix), styles.LABEL))
    parts: list[tuple[Part, ...]] = []
    if host:
        parts.append(((sanitize(host), "bold"),))
    versions: list[Part] = []
    for word, version in (("driver ", driver), ("CUDA ", cuda), ("ROCm ", rocm)):
        if version:
            if versions:
                versions.append((" · ", styles.LABEL))
            versions += [(word, styles.LABEL), (sanitize(version), "")]
    if versions:
        parts.append(tuple(versions))
    return left, tuple(parts)


def header_parts(snap: Snapshot | None, now: float, width: int, *, interval: float,
                 state: str, started: float, suffix: str = "", position: str | None = None,
                 badge: tuple[Part, ...] | None = None) -> tuple[Part, ...]:
    """The line as parts (`header_content`), not cut at `width`. `badge`: the
    `freshness_parts` of these arguments, where the caller has them already."""
    if position is not None:
        right: tuple[Part, ...] = ((Content(position).plain, ""),)
    else:
        shown = now if snap is None else snap.time
        if badge is None:
            badge = freshness_parts(snap, now, interval, state, started)
        right = ((fmt.clock_time(shown), ""), ("  ", ""), *badge)
    parts: list[tuple[Part, ...]] = []
    if snap is not None:
        sysinfo = snap.system
        left, named = _identity(suffix, sysinfo.hostname or snap.host.hostname,
                                value(sysinfo.driver_version), value(sysinfo.cuda_version),
                                value(sysinfo.rocm_version))
        parts += named
        h = snap.host
        stats: list[Part] = []
        cpu = value(h.cpu_percent)
        if cpu is not None:
            stats += [("CPU ", styles.LABEL), (f"{cpu:.0f}%", "")]
        used, total = value(h.mem_used), value(h.mem_total)
        if used is not None and total is not None:
            if stats:
                stats.append((" ", ""))
            stats += [("RAM ", styles.LABEL), (f"{fmt.gib(used)}/{fmt.gib(total)}G", "")]
        load = value(h.load_avg)
        if load:
            if stats:
                stats.append((" ", ""))
            stats += [("load ", styles.LABEL), (f"{load[0]:.1f}", "")]
        if stats:
            parts.append(tuple(stats))
    else:
        left = _identity(suffix, None, None, None, None)[0]
    # Drop the least important parts until the line fits; the freshness badge always stays.
    return fit_line(left, parts, right, width)


def _cells(parts: tuple[Part, ...]) -> int:
    return cell_len("".join([text for text, _ in parts]))


def header_content(snap: Snapshot | None, now: float, width: int, *, interval: float,
                   state: str, started: float, suffix: str = "",
                   position: str | None = None) -> Content:
    """`position` replaces the time and the data age: a replay says where it is in the
    recording, and a recording's data is as old as it is."""
    parts = header_parts(snap, now, width, interval=interval, state=state, started=started,
                         suffix=suffix, position=position)
    return Content.assemble(*parts, strip_control_codes=False).truncate(width)


def fit_line(left: tuple[Part, ...], parts: list[tuple[Part, ...]], right: tuple[Part, ...],
             width: int) -> tuple[Part, ...]:
    """`left` and as many of `parts` as fit (the last dropped first), two spaces apart, and
    `right` against the right edge of `width` cells, at least a space after the rest (not cut
    at `width`: `header_content` cuts it). Measured part by part, put together once."""
    lengths = [_cells(p) for p in parts]
    right_length = _cells(right)
    kept = len(parts)
    length = _cells(left) + sum(2 + n for n in lengths)
    while kept and length + 2 + right_length > width:
        kept -= 1
        length -= 2 + lengths[kept]
    line = list(left)
    for p in parts[:kept]:
        line += [("  ", ""), *p]
    line += [(" " * max(1, width - length - right_length), ""), *right]
    return tuple(line)


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
        badge = None
        if position is None:
            badge = freshness_parts(self._snapshot, now, self._interval, self._state,
                                    self._started)
            moving = (badge, fmt.clock_time(now) if self._snapshot is None else None)
        key = (width, self._state, moving)
        if self._snapshot is self._shown_snapshot and key == self._shown:
            return
        self._shown_snapshot, self._shown = self._snapshot, key
        parts = header_parts(self._snapshot, now, width, interval=self._interval,
                             state=self._state, started=self._started, suffix=self._suffix,
                             position=position, badge=badge)
        if _cells(parts) <= width:
            self.set_parts(parts)
        else:  # cut as `header_content` cuts it
            self.set(Content.assemble(*parts, strip_control_codes=False).truncate(width))

    def on_resize(self) -> None:
        self.tick()
