"""Loading a processor class by import path (``package.module:Class``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, cast

from consumer.errors import ProcessorLoadError
from consumer.lifecycle.processor import RecordProcessor

__all__ = ["load_processor"]


def load_processor(path: str) -> Callable[[], RecordProcessor]:
    """Return a factory for the processor at ``path``; fail naming the path and what was wrong."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ProcessorLoadError(f"processor {path!r}: expected 'package.module:Class'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ProcessorLoadError(f"processor {path!r}: cannot import module {module_name!r}: {exc}") from exc
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ProcessorLoadError(f"processor {path!r}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ProcessorLoadError(f"processor {path!r}: {attr!r} is not a class or factory")
    missing = [
        m
        for m in ("initialize", "process_records", "lease_lost", "shard_ended", "shutdown_requested")
        if not hasattr(target, m)
    ]
    if isinstance(target, type) and missing:
        raise ProcessorLoadError(f"processor {path!r}: {attr!r} lacks {', '.join(missing)}")
    return cast(Callable[[], RecordProcessor], target)
