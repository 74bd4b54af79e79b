"""Waiting in async tests without hanging the suite."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def within(aw: Awaitable[T], seconds: float = 30.0) -> T:
    return await asyncio.wait_for(aw, seconds)


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.01)
