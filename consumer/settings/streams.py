"""The streams a worker reads and the processors it makes for them: :class:`StreamSpec`, and the checks that
a processor factory is one (a class or a function, a known ``checkpoint_mode``, no callback written as a
generator) before any shard starts."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from consumer.errors import ConfigError
from consumer.lifecycle.async_processor import inert_callback_problem

if TYPE_CHECKING:
    from consumer.lifecycle.async_processor import AsyncRecordProcessor
    from consumer.lifecycle.processor import RecordProcessor

__all__ = [
    "PROCESSOR_CHECKPOINT_MODES",
    "STREAM_NAME",
    "ProcessorFactory",
    "ProcessorLoader",
    "StreamSpec",
    "check_processor_factory",
    "for_stream",
    "stream_specs",
]

# A processor class or any callable making one processor per shard (synchronous or asyncio).
ProcessorFactory = Callable[[], "RecordProcessor | AsyncRecordProcessor"]
# What turns ``package.module:Class`` into a factory (``consumer.loader.load_processor``); it is given the
# environment the config is read from, so that a processor's declared settings are read from it too.
ProcessorLoader = Callable[[str, Mapping[str, str]], ProcessorFactory]


@dataclass(frozen=True)
class StreamSpec:
    """One stream this application consumes and the factory of its record processors (one per shard)."""

    name: str
    processor_factory: ProcessorFactory

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not STREAM_NAME.fullmatch(self.name):
            raise ConfigError(
                "streams",
                f"stream name must be 1..128 characters of a-z, A-Z, 0-9, '_', '.', '-', got {self.name!r}",
            )
        check_processor_factory(
            f"StreamSpec.processor_factory (stream {self.name!r})", self.processor_factory
        )
        _check_checkpoint_mode(self.name, self.processor_factory)
        _check_callbacks(self.name, self.processor_factory)


#: Kinesis's own rule for stream names (CreateStream's StreamName).
STREAM_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")


# What a processor class may declare as its own ``checkpoint_mode`` (``explicit``: MultiLang's, only the
# processor's checkpoint(position) calls write); anything else would silently run as auto.
PROCESSOR_CHECKPOINT_MODES = ("auto", "manual", "explicit")


def _check_checkpoint_mode(stream: str, factory: object) -> None:
    """A processor class's ``checkpoint_mode`` must be one the worker knows: a typo (``"Manual"``) would
    otherwise checkpoint each batch as it returns, records not done included."""
    if not isinstance(factory, type):
        return
    mode = getattr(factory, "checkpoint_mode", None)
    if mode is not None and mode not in PROCESSOR_CHECKPOINT_MODES:
        raise ConfigError(
            f"{factory.__name__}.checkpoint_mode (stream {stream!r})",
            f"must be one of {', '.join(PROCESSOR_CHECKPOINT_MODES)}; got {mode!r}",
        )


def _check_callbacks(stream: str, factory: object) -> None:
    """A processor class none of whose callbacks is a generator function: called, one would run none of its
    body, and the worker would checkpoint its records unprocessed. What a factory function makes is checked
    when it is built by the loader or ``create_worker(processor=...)`` (``checked_factory``), and any call that
    gives back such unrun work fails when it runs (``ProcessorAdapter``)."""
    if not isinstance(factory, type):
        return
    if problem := inert_callback_problem(factory):
        raise ConfigError(f"StreamSpec.processor_factory (stream {stream!r})", problem)


def check_processor_factory(field: str, factory: object) -> None:
    """Raise a ``ConfigError`` naming ``field`` unless ``factory`` is a class or a function making one
    processor per shard (not a processor instance, nor an import path). What it makes is checked when it
    runs: by the start-up checks (``ProcessorLoadError``)."""
    if isinstance(factory, str):
        raise ConfigError(
            field,
            f"got the string {factory!r}: give the class itself (a path is read from CONSUMER_PROCESSOR)",
        )
    if not callable(factory):
        kind = type(factory).__name__
        hint = (
            f" pass the class {kind} (one processor is made per shard)"
            if callable(getattr(factory, "process_records", None))
            else " pass a processor class, or a function returning a new processor"
        )
        raise ConfigError(field, f"got a {kind!r} instance, not a class or factory:{hint}")


def for_stream(stream: str, factory: ProcessorFactory) -> ProcessorFactory:
    """``factory`` whose processors are told, as they are made, which stream they will read: a processor
    with a ``check_source_stream(stream)`` method (e.g. the stream copier, whose target must be another
    stream) refuses a stream it cannot serve there, when the start-up checks construct it once."""

    def make() -> RecordProcessor | AsyncRecordProcessor:
        processor = factory()
        check = getattr(processor, "check_source_stream", None)
        if callable(check):
            check(stream)
        return processor

    return make


def stream_specs(streams: object) -> tuple[StreamSpec, ...]:
    """``streams`` as a tuple, each a ``StreamSpec`` (errors name the field and the item)."""
    if isinstance(streams, StreamSpec | str) or not isinstance(streams, Sequence):
        raise ConfigError("streams", f"must be a tuple of StreamSpec, got {type(streams).__name__}")
    for i, spec in enumerate(streams):
        if not isinstance(spec, StreamSpec):
            raise ConfigError(f"streams[{i}]", f"must be a StreamSpec, got {type(spec).__name__}")
    return tuple(streams)
