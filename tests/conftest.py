"""Fixtures shared by the test modules."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Clock times on screen and in replays do not depend on where the tests run
    (a module opts in with `pytestmark = pytest.mark.usefixtures("utc")`)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(autouse=True)
def no_user_config(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
                   ) -> None:
    """A config file in the home of whoever runs the tests must not change what they see."""
    monkeypatch.setenv("GPUTOP_CONFIG", str(tmp_path_factory.getbasetemp() / "no-config.toml"))
