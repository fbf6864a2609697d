"""A memo for ``consumer.dynamo.from_item`` while simulating: the same results, decoded once per item version.

The in-memory client replaces an item on every write and hands out the stored object on reads, so an item's
identity names one version of it. A fleet of simulated workers reading the same table decodes the same
item versions over and over; this memo decodes each once. It is installed only for the duration of a
simulation, in every ``consumer`` module that imported ``from_item`` by name, and removed afterwards.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import consumer.dynamo

__all__ = ["memoized_decoding"]


@contextmanager
def memoized_decoding(limit: int = 500_000) -> Iterator[None]:
    original = consumer.dynamo.from_item
    memo: dict[int, tuple[Mapping[str, Any], dict[str, Any]]] = {}

    def from_item(item: Mapping[str, Any]) -> dict[str, Any]:
        hit = memo.get(id(item))
        if hit is not None and hit[0] is item:
            return dict(hit[1])  # a fresh dict: callers may keep or change it
        decoded = original(item)
        if len(memo) >= limit:
            memo.clear()
        memo[id(item)] = (item, decoded)  # holding the item keeps its id from being reused
        return dict(decoded)

    patched = [
        m
        for name, m in list(sys.modules.items())
        if (name == "consumer" or name.startswith("consumer.")) and getattr(m, "from_item", None) is original
    ]
    for module in patched:
        module.from_item = from_item  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in patched:
            module.from_item = original  # type: ignore[attr-defined]
