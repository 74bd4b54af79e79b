"""The config file: what a user sets once (interval, layout, theme, read-only, devices, colour
thresholds), flags winning over it, every mistake in it said in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.commands import config, monitor
from gputop.commands.config import ConfigError
from gputop.errors import GputopError
from gputop.testing.synthetic import h100
from gputop.ui.view import status
from tests.helpers.ui import make_app

FULL = """\
interval = 2
layout = "cards"
theme = "light"
readonly = true
devices = "0,2-3"
mouse = false

[thresholds]
memory_warn = 90
temp_warm = 15
temp_hot = 5
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def parse(path: Path, *argv: str) -> tuple[config.Config, object]:
    parser = monitor.build_parser()
    settings = config.load(path)
    config.apply(parser, settings)
    return settings, parser.parse_args(list(argv))


def test_the_file_sets_the_defaults_and_flags_win(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    settings, args = parse(path)
    assert (args.interval, args.layout, args.theme, args.readonly, args.devices,
            args.no_mouse) == (2.0, "cards", "light", True, {0, 2, 3}, True)
    assert settings.thresholds == status.Thresholds(memory_warn=90, temp_warm=15, temp_hot=5)
    _, args = parse(path, "--interval", "0.5", "--layout", "auto", "--theme", "nord",
                    "--no-readonly", "--devices", "1", "--mouse")
    assert (args.interval, args.layout, args.theme, args.readonly, args.devices,
            args.no_mouse) == (0.5, "auto", "nord", False, {1}, False)


def test_no_file_is_the_built_in_defaults(tmp_path: Path) -> None:
    settings, args = parse(tmp_path / "absent.toml")
    assert not settings.found
    assert (args.interval, args.layout, args.theme, args.readonly) == (1.0, "auto", None, False)
    assert settings.thresholds == status.Thresholds()


def test_the_path_follows_xdg() -> None:
    assert config.config_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/gputop/config.toml")
    assert config.config_path({"HOME": "/home/u"}) == Path("/home/u/.config/gputop/config.toml")
    assert config.config_path({"GPUTOP_CONFIG": "/etc/g.toml", "XDG_CONFIG_HOME": "/x"}) == \
        Path("/etc/g.toml")


@pytest.mark.parametrize(("text", "said"), [
    ("intervall = 2\n", "unknown key 'intervall'"),
    ("interval = \"fast\"\n", "interval must be a number"),
    ("interval = -1\n", "interval must be a number greater than 0"),
    ("layout = \"grid\"\n", 'layout must be "auto" or "compact" or "cards"'),
    ("readonly = \"yes\"\n", "readonly must be true or false"),
    ("devices = \"all\"\n", "devices must be GPU indexes"),
    ("[thresholds]\nmemory_warn = 120\n", "memory_warn is a percentage"),
    ("[thresholds]\ntemp_hot = 20\n", "temp_hot must not be above temp_warm"),
    ("[thresholds]\nhot = 1\n", "unknown key thresholds.hot"),
    ("interval = [\n", "not valid TOML"),
])
def test_a_mistake_is_said_in_one_line_naming_the_file(tmp_path: Path, text: str,
                                                       said: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        config.load(path)
    assert str(e.value).startswith(f"{path}: ") and said in str(e.value)
    assert e.value.exit_code == 2
    r = subprocess.run([sys.executable, "-m", "gputop", "--once"], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "GPUTOP_CONFIG": str(path)})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and said in r.stderr


def test_print_config_shows_what_is_in_force(tmp_path: Path) -> None:
    path = write(tmp_path, FULL)
    r = subprocess.run([sys.executable, "-m", "gputop", "--print-config", "--interval", "5"],
                       capture_output=True, text=True, timeout=60,
                       env={**os.environ, "GPUTOP_CONFIG": str(path)})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"# {path} (read), then the command line"
    assert "interval = 5" in lines and 'layout = "cards"' in lines
    assert 'theme = "light"' in lines and "readonly = true" in lines
    assert "devices = [0, 2, 3]" in lines and "mouse = false" in lines
    assert "memory_warn = 90" in lines and "temp_hot = 5" in lines
    # what it prints is itself a config file that gives the same settings
    again = write(tmp_path, r.stdout.replace("interval = 5", "interval = 5.0"))
    _, args = parse(again)
    assert (args.interval, args.layout, args.devices, args.no_mouse) == (5.0, "cards",
                                                                          {0, 2, 3}, True)


def test_thresholds_move_the_temperature_badges() -> None:
    gpu = h100(0, temp_margin=12.0, throttle=())
    assert [b.text for b in status.badges(gpu)] == []
    status.use_thresholds(status.Thresholds(temp_warm=15, temp_hot=5))
    try:
        assert [b.text for b in status.badges(gpu)] == ["▲ WARM"]
        assert [b.text for b in status.badges(h100(0, temp_margin=4.0))] == ["▲ HOT",
                                                                             "PWR CAP"]
    finally:
        status.use_thresholds(status.Thresholds())


async def test_the_theme_and_layout_reach_the_dashboard() -> None:
    app = make_app(theme="light", layout="compact")
    async with app.run_test(size=(120, 40)):
        assert app.theme == "textual-light"
        assert app.dashboard.layout_override == "compact"
    assert make_app(ansi=True).theme == "ansi-dark"
    assert make_app(theme="ansi-light", ansi=True).theme == "ansi-light"
    with pytest.raises(GputopError, match=r"no theme 'nope'.*textual-light"):
        make_app(theme="nope")
