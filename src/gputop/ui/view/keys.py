"""Every key of the dashboard in one place: the app's bindings and the help screen come from it."""

from __future__ import annotations

from dataclasses import dataclass

from gputop.ui.view.status import CROSS


@dataclass(frozen=True, slots=True)
class Key:
    keys: str  # Textual key names, comma separated
    action: str | None  # the app action, or None for keys that widgets and screens handle
    description: str  # short, for the footer
    help: str  # one line, for the help screen
    show: bool = False  # in the footer
    display: str = ""  # how the help screen writes the key
    group: str = ""  # keys with the same group share one footer entry


APP_KEYS: tuple[Key, ...] = (
    Key("q", "quit", "Quit", "quit gputop", show=True),
    Key("question_mark", "help", "Help", "this help", show=True, display="?"),
    Key("slash", "filter", "Filter", "filter processes: words, user:NAME, gpu:N (Esc clears)",
        show=True, display="/"),
    Key("s", "sort(1)", "Sort", "sort processes by the next column", show=True),
    Key("S", "sort(-1)", "Sort back", "sort processes by the previous column", display="S"),
    Key("r", "reverse", "Reverse", "reverse the sort order"),
    Key("e", "expand", "Workers", "show / hide a process's DataLoader workers (also Enter)",
        show=True),
    Key("k", "kill", "Kill", "kill the selected process (asks first; TERM, then KILL)",
        show=True),
    Key("d", "detail", "Detail", "detail view of the selected GPU (also Enter on a GPU)",
        show=True),
    Key("t", "topology", "Topology", "NVLink / xGMI topology and links", show=True),
    Key("v", "layout", "Layout", "layout: auto, one line per GPU, cards"),
    Key("tab", None, "", "move between the GPUs, the Findings and the processes",
        display="Tab"),
)

# Only in `gputop replay`. Home and End also work while the process list has the focus (there
# they would otherwise go to its first and last row).
REPLAY_KEYS: tuple[Key, ...] = (
    Key("space", "replay_pause", "Play/pause", "pause / play the recording", show=True,
        display="Space"),
    Key("comma", "replay_step(-1)", "Back", "one tick back (pauses)", show=True, display=",",
        group="Step"),
    Key("full_stop", "replay_step(1)", "Forward", "one tick forward (pauses)", show=True,
        display=".", group="Step"),
    Key("minus", "replay_speed(-1)", "Slower", "play slower (down to 0.25x)", show=True,
        display="-", group="Speed"),
    Key("plus,equals_sign", "replay_speed(1)", "Faster", "play faster (up to 64x)", show=True,
        display="+", group="Speed"),
    Key("g", "replay_seek", "Go to", "go to a time (10:04:20), an offset (-5m, +90s) or a "
        "tick (260)", show=True),
    Key("home", "replay_jump(0)", "Start", "go to the start of the recording", display="Home"),
    Key("end", "replay_jump(1)", "End", "go to the end (with --follow: live again, the newest "
        "tick and on)", display="End"),
)

OTHER_KEYS: tuple[tuple[str, str], ...] = (
    ("↑ ↓ ← →", "select a GPU or a process"),
    ("Enter", "on a GPU: detail view; on a process: its workers"),
    ("Esc", "close a view or this help; clear the filter"),
    ("click", "select; double-click a GPU for its detail view; click a header to sort"),
    ("← → [ ]", "in the detail view: previous / next GPU"),
    ("y / n", "in the kill dialog: kill / keep"),
)

LEGEND: tuple[tuple[str, str], ...] = (
    ("█ ▒", "memory: used by processes, reserved by the driver"),
    ("▁▃▅█", "history, fixed scale: 0-100 %, 0-total memory, 0-power limit"),
    ("·", "no value at that tick (GPU lost, not supported)"),
    ("PWR CAP", "held at the power limit: normal under full load"),
    ("▲ THERMAL", "clocks cut to stay below the temperature limit"),
    ("▲ HW …", "hardware slowdown (thermal, power brake): clocks halved or worse"),
    ("▲ WARM / HOT", "10 °C / 3 °C or less from the slowdown temperature"),
    ("▼ PCIe", "link below its max generation or width while busy"),
    (f"{CROSS} LOST", "the GPU fell off the bus"),
    ("n/s, no perm, …", "not supported, needs privileges, not sampled yet"),
)

# `gputop fleet`: its own keys, for its footer and its help screen.
FLEET_KEYS: tuple[Key, ...] = (
    Key("q", "quit", "Quit", "quit (also Ctrl-C)", show=True),
    Key("question_mark", "help", "Help", "this help", show=True, display="?"),
    Key("r", "refresh_now", "Refresh now", "ask Prometheus again now", show=True),
)

FLEET_OTHER_KEYS: tuple[tuple[str, str], ...] = (
    ("↑ ↓", "select a node or a GPU"),
    ("Enter", "on a node: its GPUs and Findings"),
    ("Esc", "back to the fleet; close this help"),
    ("click", "select; click a header to sort"),
)
