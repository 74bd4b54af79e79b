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
