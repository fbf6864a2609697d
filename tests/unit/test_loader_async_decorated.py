"""A processor loaded by path (``CONSUMER_PROCESSOR``, ``--processor``) whose ``async def process_records`` sits
behind an ordinary decorator is still run as a coroutine: its records are processed, not dropped as a
never-awaited coroutine while the checkpoint moves past them."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from consumer import AsyncBaseProcessor
from consumer.lifecycle.async_processor import returns_coroutine
from consumer.loader import load_processor

SEEN: list[object] = []


def _logged(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


class DecoratedAsync(AsyncBaseProcessor):
    """An asyncio processor whose callback a plain (sync) decorator wraps."""

    @_logged
    async def process_records(self, data: Any) -> None:
        SEEN.append(data)


def test_a_decorated_async_callback_loaded_by_path_stays_a_coroutine_and_runs() -> None:
    processor = load_processor(f"{__name__}:DecoratedAsync", {})()
    assert returns_coroutine(processor.process_records)
    SEEN.clear()
    asyncio.run(processor.process_records("batch"))  # type: ignore[arg-type]
    assert SEEN == ["batch"]
