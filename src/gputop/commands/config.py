"""The config file: settings a user wants every time, so that flags are for the exception.

`$GPUTOP_CONFIG`, else `$XDG_CONFIG_HOME/gputop/config.toml` (`~/.config/gputop/config.toml`).
TOML, read with the standard library's `tomllib` (`tomli` before Python 3.11). A flag on the
command line wins over the file, the file over the built-in default. A file that is not valid
TOML, a key gputop does not know or a value of the wrong kind ends gputop with a one-line error
naming the file: a typo is never silently ignored.

    interval = 2            # seconds between polls
    layout = "cards"        # auto | compact | cards
    theme = "light"         # dark | light | a Textual theme (nord, ansi-light, ...)
    readonly = true         # never offer to kill a process
    devices = "0-3"         # or [0, 1, 2, 3]
    mouse = false
    ansi = false

    [thresholds]
    memory_warn = 90        # % of a GPU's memory at which its bar turns to the warning colour
    temp_warm = 10          # °C below the slowdown temperature: ▲ WARM
    temp_hot = 3            # °C below the slowdown temperature: ▲ HOT
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputop.commands.args import device_list
from gputop.errors import GputopError
from gputop.ui.view.status import Thresholds

EXIT_CONFIG = 2  # as argparse does for a bad flag
LAYOUTS = ("auto", "compact", "cards")


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get("GPUTOP_CONFIG"):
        return Path(env["GPUTOP_CONFIG"]).expanduser()
    base = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or "~", ".config")
    return Path(base).expanduser() / "gputop" / "config.toml"


@dataclass(frozen=True)
class Config:
    """What the file says: argparse defaults (by destination) and the colour thresholds."""

    path: Path
    found: bool = False
    defaults: dict[str, Any] = field(default_factory=dict)
    thresholds: Thresholds = field(default_factory=Thresholds)


class ConfigError(GputopError):
    exit_code = EXIT_CONFIG

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(f"{path}: {message}")


def _number(positive: bool = True) -> Callable[[Any], float]:
    def check(v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError("a number")
        if positive and v <= 0:
            raise ValueError("a number greater than 0")
        return float(v)
    return check


def _boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError("true or false")
    return v


def _string(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("a string")
    return v.strip()


def _layout(v: Any) -> str:
    if v not in LAYOUTS:
        raise ValueError(" or ".join(f'"{name}"' for name in LAYOUTS))
    return str(v)


def _devices(v: Any) -> set[int]:
    if isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                   for i in v):
        return set(v)
    if isinstance(v, str):
        try:
            return device_list(v)
        except argparse.ArgumentTypeError:
            pass
    raise ValueError('GPU indexes, as "0,1,4-7" or [0, 1, 4]')


# key -> (argparse destination, check turning the TOML value into the argparse value)
SETTINGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "interval": ("interval", _number()),
    "layout": ("layout", _layout),
    "theme": ("theme", _string),
    "readonly": ("readonly", _boolean),
    "devices": ("devices", _devices),
    "mouse": ("no_mouse", lambda v: not _boolean(v)),
    "ansi": ("ansi", _boolean),
}
THRESHOLDS: dict[str, str] = {  # key in [thresholds] -> Thresholds field
    "memory_warn": "memory_warn",
    "temp_warm": "temp_warm",
    "temp_hot": "temp_hot",
}


def load(path: Path | None = None) -> Config:
    """The config in force; an absent file is the built-in defaults."""
    path = config_path() if path is None else path
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return Config(path)  # most machines: and then no TOML parser is loaded at all
    except OSError as e:
        raise ConfigError(path, f"cannot read it: {e.strerror or e}") from None
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(raw.decode())
    except UnicodeDecodeError as e:
        raise ConfigError(path, f"not UTF-8 text: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(path, f"not valid TOML: {e}") from None
    defaults: dict[str, Any] = {}
    thresholds: dict[str, float] = {}
    for key, v in data.items():
        if key == "thresholds":
            if not isinstance(v, dict):
                raise ConfigError(path, "[thresholds] must be a table")
            for name, number in v.items():
                if name not in THRESHOLDS:
                    raise ConfigError(path, f"unknown key thresholds.{name} (known: "
                                            f"{', '.join(THRESHOLDS)})")
                try:
                    thresholds[THRESHOLDS[name]] = _number()(number)
                except ValueError as e:
                    raise ConfigError(path, f"thresholds.{name} must be {e}") from None
            continue
        if key not in SETTINGS:
            raise ConfigError(path, f"unknown key {key!r} (known: {', '.join(SETTINGS)}, "
                                    "[thresholds])")
        dest, check = SETTINGS[key]
        try:
            defaults[dest] = check(v)
        except ValueError as e:
            raise ConfigError(path, f"{key} must be {e}") from None
    try:
        limits = Thresholds(**thresholds)
    except ValueError as e:
        raise ConfigError(path, f"[thresholds]: {e}") from None
    return Config(path, True, defaults, limits)


DISPLAY_KEYS = ("theme", "mouse", "ansi")  # what replay and fleet take from the file


def apply(parser: argparse.ArgumentParser, config: Config,
          keys: Sequence[str] = tuple(SETTINGS)) -> None:
    """Make the file's settings (those named by `keys`) the parser's defaults."""
    dests = {SETTINGS[k][0] for k in keys}
    parser.set_defaults(**{k: v for k, v in config.defaults.items() if k in dests})


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (set, frozenset, list, tuple)):
        return "[" + ", ".join(str(i) for i in sorted(v)) + "]"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v), ensure_ascii=False)  # a TOML basic string is a JSON string


def render(args: argparse.Namespace, config: Config) -> str:
    """The settings in force (file, then flags), as a config file that would give them."""
    where = "read" if config.found else "not found; built-in defaults"
    lines = [f"# {config.path} ({where}), then the command line"]
    for key, (dest, _) in SETTINGS.items():
        if not hasattr(args, dest):
            continue
        v = getattr(args, dest)
        if key == "mouse":
            v = not v
        elif key == "theme":
            v = v or ("ansi-dark" if getattr(args, "ansi", False) else "textual-dark")
        if v is None:
            lines.append(f"# {key}: all" if key == "devices" else f"# {key}: not set")
            continue
        lines.append(f"{key} = {_toml(v)}")
    lines += ["", "[thresholds]"]
    lines += [f"{key} = {_toml(getattr(config.thresholds, name))}"
              for key, name in THRESHOLDS.items()]
    return "\n".join(lines) + "\n"
