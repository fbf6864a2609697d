"""Loading a processor class by import path (``package.module:Class``), and checking what it makes."""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from consumer.errors import ConsumerError, ProcessorLoadError
from consumer.lifecycle.async_processor import inert_callback_problem, returns_coroutine, unrun_work
from consumer.lifecycle.processor import ProcessRecordsInput, RecordProcessor
from consumer.logs import log_event

__all__ = ["CALLBACKS", "checked_factory", "failure_text", "load_processor", "settings_for"]

logger = logging.getLogger(__name__)

CALLBACKS = ("initialize", "process_records", "lease_lost", "shard_ended", "shutdown_requested")

_warned: set[str] = set()
_warned_lock = threading.Lock()


def load_processor(path: str, env: Mapping[str, str] | None = None) -> Callable[[], RecordProcessor]:
    """Return a factory for the processor at ``path``; fail naming the path and what was wrong.

    With ``env``, a processor class that declares its settings (``settings_type``, e.g. the raw S3 sink's
    :class:`~consumer.config.RawSinkConfig`) gets them handed in: read from ``env`` once, here, so that a bad
    value fails now and names its variable (see :func:`settings_for`)."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ProcessorLoadError(f"processor {path!r}: expected 'package.module:Class'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # importing user code can raise anything: named as the setting's fault
        raise ProcessorLoadError(f"processor {path!r}: cannot import module {module_name!r}: {exc}") from exc
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ProcessorLoadError(f"processor {path!r}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ProcessorLoadError(f"processor {path!r}: {attr!r} is not a class or factory")
    missing = [m for m in CALLBACKS if not hasattr(target, m)]
    if isinstance(target, type) and missing:
        raise ProcessorLoadError(f"processor {path!r}: {attr!r} lacks {', '.join(missing)}")
    if isinstance(target, type) and (problem := inert_callback_problem(target)):
        raise ProcessorLoadError(f"processor {path!r}: {problem}")  # before anything is constructed
    settings = settings_for(target, env) if env is not None else None
    if settings is not None:
        target = functools.partial(target, settings=settings)
    return checked_factory(path, target)


def settings_for(target: object, env: Mapping[str, str]) -> object | None:
    """The settings ``target`` declares (a class whose ``settings_type`` is a settings dataclass that
    :mod:`consumer.config` reads from the environment, and whose constructor takes ``settings=``), read
    from ``env``; None for anything else (it is constructed bare)."""
    from consumer.config import settings_from_env  # the config module imports this one's callers

    settings_type = getattr(target, "settings_type", None)
    if not isinstance(target, type) or settings_type is None:
        return None
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):  # a signature Python cannot read: constructed bare
        return None
    takes = "settings" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    return settings_from_env(settings_type, env) if takes else None


def failure_text(exc: BaseException) -> str:
    """``exc`` as a processor factory's failure reads in a message: ``Type: message``, and a ``sys.exit()``
    with its code (``SystemExit: sys.exit(3) was called``)."""
    if isinstance(exc, SystemExit):
        return f"SystemExit: sys.exit({exc.code!r}) was called"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def checked_factory(path: str, factory: Callable[[], Any]) -> Callable[[], RecordProcessor]:
    """``factory`` whose failures name ``path``, whose products are checked to be record processors (every
    callback there, none a generator function: ``inert_callback_problem``), and whose ``process_records``
    return values are reported (once per path) instead of silently ignored."""

    def make() -> RecordProcessor:
        try:
            processor = factory()
        except ConsumerError:
            raise  # already names the setting (e.g. a processor's ConfigError)
        # The user's constructor: named, with the path, as the setting's fault. Also ``sys.exit()`` or
        # ``KeyboardInterrupt`` from it: they would otherwise end ``run``'s start-up check silently with the
        # constructor's exit code (0 looks like a clean stop), or with a traceback.
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            raise ProcessorLoadError(
                f"processor {path!r}: constructing it failed: {failure_text(exc)}"
            ) from exc
        missing = [m for m in CALLBACKS if not callable(getattr(processor, m, None))]
        if missing:
            raise ProcessorLoadError(
                f"processor {path!r}: the factory returned a {type(processor).__name__!r}, not a record "
                f"processor (it lacks {', '.join(missing)})"
            )
        if problem := inert_callback_problem(processor):
            raise ProcessorLoadError(f"processor {path!r}: {problem}")
        _report_return_values(path, processor)
        return processor  # type: ignore[no-any-return]

    return make


def _warn_returned(path: str, result: object) -> None:
    if result is None or unrun_work(result):  # work that never ran: the adapter fails the call (TypeError)
        return
    with _warned_lock:
        first = path not in _warned
        _warned.add(path)
    if first:
        log_event(
            logger,
            "processor_return_value_ignored",
            logging.WARNING,
            processor=path,
            returned=type(result).__name__,
            hint="process_records returns None: records are checkpointed when it returns (auto mode) "
            "or when each is marked done() (manual mode); a returned value is ignored",
        )


def _report_return_values(path: str, processor: Any) -> None:
    original = processor.process_records
    wrapper: Callable[[ProcessRecordsInput], Any]
    if returns_coroutine(original):  # stays a coroutine function: the worker runs it on its loop

        async def process_records_async(data: ProcessRecordsInput) -> Any:
            result = await original(data)
            _warn_returned(path, result)
            return result

        wrapper = process_records_async
    else:

        def process_records(data: ProcessRecordsInput) -> Any:
            result = original(data)
            _warn_returned(path, result)
            return result

        wrapper = process_records
    try:
        processor.process_records = wrapper
    except (AttributeError, TypeError):  # __slots__ or a read-only attribute: leave it unwrapped
        log_event(logger, "processor_not_wrapped", logging.DEBUG, processor=path)
