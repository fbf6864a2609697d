"""The raw line format (format 2) and object keys: pure functions of the records, no I/O.

Format (docs/data-format.md): ``<prefix>/stream=<s>/date=YYYY-MM-DD/hour=HH/<shard>_<firstseq>_<firstsub>_
<lastseq>_<lastsub>.jsonl.gz``, partitioned by the records' Kinesis arrival time; keys are deterministic from
the bounds, so a re-delivered batch with the same bounds overwrites its object instead of duplicating it.

Each line is strict JSON (format 2, ``"v":2``) and keeps the record's bytes exactly: ``data`` holds them as
text when they are a JSON text (see :func:`json_text`), ``data_base64`` otherwise. Nothing is parsed and
written back, so numbers, key order, escapes and whitespace survive; :func:`record_data` gives the bytes back
from a parsed line.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC
from typing import Any

from consumer.records import Record

__all__ = ["RAW_FORMAT", "encode_line", "hour_of", "json_text", "object_key", "record_data"]

#: The raw line format this sink writes (the ``v`` field; lines without it are format 1).
RAW_FORMAT = 2
# Bounds within which a JSON text is kept as text: Spark's JSON parser (Jackson) refuses deeper nesting than
# 1,000, numbers longer than 1,000 characters and keys longer than 50,000 bytes; the margins are deliberate.
_MAX_DEPTH = 500
_MAX_NUMBER = 1_000
_MAX_KEY = 10_000
_SURROGATE = re.compile("[\\ud800-\\udfff]")


class _Object(list[tuple[str, Any]]):
    """A parsed JSON object as its (key, value) pairs (no dict built); duplicate keys are refused."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        if len(pairs) > 1 and len({key for key, _ in pairs}) < len(pairs):
            raise ValueError("duplicate key")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _number(text: str) -> int:
    if len(text) > _MAX_NUMBER:
        raise ValueError("number too long")
    return 0  # only the syntax matters; the text is kept as it is


def _within_bounds(value: Any) -> bool:
    """No escaped lone surrogate, no key past ``_MAX_KEY`` characters, nesting within ``_MAX_DEPTH``."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return False
        elif isinstance(item, list):
            if depth >= _MAX_DEPTH:
                return False
            if isinstance(item, _Object):
                for key, child in item:
                    if len(key) > _MAX_KEY or _SURROGATE.search(key):
                        return False
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
    return True


def json_text(data: bytes) -> str | None:
    """``data`` as text when it is a JSON text that every strict reader accepts, else ``None``.

    Strict means RFC 8259 read the interoperable way: UTF-8 without a byte-order mark, no ``NaN``/``Infinity``,
    comments, single quotes or trailing commas, no escaped lone surrogate (``"\\\\ud800"`` is no character),
    unique keys in every object (readers disagree on duplicates: first, last or error), and within the bounds
    of Spark's parser (nesting <= 500, numbers <= 1,000 characters, keys <= 10,000). Any whitespace, escapes
    and numbers of any precision or size (``1e400``) are fine: the text is kept, never re-serialized. Data
    outside this goes to ``data_base64``, as exact.
    """
    try:
        text = data.decode("utf-8")
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_int=_number,
            parse_float=_number,
            object_pairs_hook=_Object,
        )
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    needs_walk = "\\u" in text or len(text) > _MAX_KEY or text.count("[") + text.count("{") > _MAX_DEPTH
    if needs_walk and not _within_bounds(value):
        return None
    return text


def _arrival(record: Record) -> str:
    t = record.approximate_arrival.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def encode_line(record: Record, epoch: int) -> bytes:
    """One raw line (format 2, without its newline): strict JSON that keeps the record's bytes exactly."""
    head = json.dumps(
        {
            "v": RAW_FORMAT,
            "stream": record.stream,
            "shard_id": record.shard_id,
            "sequence_number": record.sequence_number,
            "sub_sequence_number": record.sub_sequence_number,
            "partition_key": record.partition_key,
            "arrival_time": _arrival(record),
            "epoch": epoch,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )
    text = json_text(record.data)
    if text is not None:
        data = '"data":' + json.dumps(text, ensure_ascii=False)
    else:
        data = '"data_base64":"' + base64.b64encode(record.data).decode("ascii") + '"'
    return (head[:-1] + "," + data + "}").encode("utf-8", "backslashreplace")


def record_data(line: Mapping[str, Any]) -> bytes:
    """The record's exact bytes from a parsed format-2 line (``ValueError`` for anything else)."""
    if line.get("v") != RAW_FORMAT:
        raise ValueError(f"not a format-{RAW_FORMAT} raw line (v={line.get('v')!r})")
    if isinstance(line.get("data"), str) and "data_base64" not in line:
        return str(line["data"]).encode("utf-8")
    if isinstance(line.get("data_base64"), str) and "data" not in line:
        try:
            return base64.b64decode(str(line["data_base64"]), validate=True)
        except binascii.Error as err:
            raise ValueError(f"data_base64 is not base64: {err}") from None
    raise ValueError("a format-2 line holds exactly one of data (string) and data_base64 (string)")


def hour_of(record: Record) -> tuple[str, str]:
    """The record's arrival (date, hour) in UTC: its partition, and the buffer it joins."""
    t = record.approximate_arrival.astimezone(UTC)
    return t.strftime("%Y-%m-%d"), t.strftime("%H")


def object_key(prefix: str, records: Sequence[Record]) -> str:
    """The object of ``records`` (one shard, one arrival hour, in order): deterministic from their bounds."""
    first, last = records[0], records[-1]
    date, hour = hour_of(first)
    name = (
        f"{first.shard_id}_{first.sequence_number}_{first.sub_sequence_number}_"
        f"{last.sequence_number}_{last.sub_sequence_number}.jsonl.gz"
    )
    root = prefix.strip("/")
    return f"{root + '/' if root else ''}stream={first.stream}/date={date}/hour={hour}/{name}"
