"""GetRecords and SubscribeToShard bodies decoded without botocore's per-field shape walk.

botocore turns a JSON body into a response by walking the output shape for every field of every record
(a method lookup and call per field, a new dict per record): about 3.7 µs a record, three times what
``json.loads`` and base64 cost. The parsers here are botocore's own ``json`` protocol parsers with one
override: a structure that holds Kinesis records (``GetRecordsOutput``, ``SubscribeToShardEvent``) is built
from the decoded JSON directly, each record's dict kept and its ``Data`` and ``ApproximateArrivalTimestamp``
replaced in place. Everything else (other operations, other members such as ``ChildShards``, errors and
modeled exceptions, event-stream framing, response metadata) is botocore's code path, unchanged; a record
that does not look exactly like Kinesis's (an unknown or null field, a field of an unexpected type) is handed
to botocore's own walk, so the result is the one botocore gives, value for value
(``tests/unit/test_getrecords_parser.py`` checks that on arbitrary bodies).

Install with ``LeanParserFactory`` as a botocore session's ``response_parser_factory`` component
(``consumer.aws.make_client`` does, for Kinesis clients). Only the ``json`` protocol is specialised, which is
what botocore uses for Kinesis; any other protocol (e.g. ``smithy-rpc-v2-cbor`` should a later botocore move
Kinesis there) gets botocore's stock parser.
"""

from __future__ import annotations

import logging
from binascii import a2b_base64
from collections.abc import Callable
from typing import Any

from botocore.model import Shape
from botocore.parsers import (
    PROTOCOL_PARSERS,
    EventStreamJSONParser,
    JSONParser,
    ResponseParser,
    ResponseParserFactory,
)

__all__ = ["LEAN_SHAPES", "LeanEventStreamJSONParser", "LeanJSONParser", "LeanParserFactory"]

logger = logging.getLogger(__name__)

LEAN_SHAPES = frozenset({"GetRecordsOutput", "SubscribeToShardEvent"})  # structures holding ``Records``

_SEQ, _TS, _DATA, _PK, _ENC = (
    "SequenceNumber",
    "ApproximateArrivalTimestamp",
    "Data",
    "PartitionKey",
    "EncryptionType",
)
_RECORD_TYPES = {_SEQ: "string", _TS: "timestamp", _DATA: "blob", _PK: "string", _ENC: "string"}
_UNSET = object()


class _Slow(Exception):
    """This record is left to botocore's walk."""


def _is_kinesis_record(shape: Shape) -> bool:
    """Whether ``shape`` is Kinesis's ``Record`` as this module knows it: the same members, types and wire
    names (a model that changes them turns the fast path off rather than parse differently)."""
    members = getattr(shape, "members", None)
    if members is None or {name: m.type_name for name, m in members.items()} != _RECORD_TYPES:
        return False
    return all("name" not in m.serialization for m in members.values())


class _LeanRecords(ResponseParser):  # type: ignore[misc]
    """The override shared by the response parser and the event-stream parser."""

    def _handle_structure(self, shape: Shape, value: Any) -> Any:
        if shape.name in LEAN_SHAPES and type(value) is dict:
            records = shape.members.get("Records")
            if records is not None and _is_kinesis_record(records.member):
                return self._lean_structure(shape, value, records.member)
        return super()._handle_structure(shape, value)

    def _lean_structure(self, shape: Shape, value: dict[str, Any], record_shape: Shape) -> dict[str, Any]:
        parsed: dict[str, Any] = {}
        for name, member in shape.members.items():
            raw = value.get(member.serialization.get("name", name))
            if raw is None:
                continue
            if name == "Records" and type(raw) is list:
                parsed[name] = self._records(raw, record_shape)
            else:
                parsed[name] = self._parse_shape(member, raw)
        return parsed

    def _blob(self) -> Callable[[Any], bytes]:
        parser = self._blob_parser
        if getattr(parser, "__func__", None) is ResponseParser._default_blob_parser:
            return a2b_base64  # what base64.b64decode does for text, without its Python-level wrapper
        return parser  # type: ignore[no-any-return]

    def _records(self, items: list[Any], record_shape: Shape) -> list[Any]:
        """``items`` (the decoded JSON list, ours to change) with each record's blob and timestamp parsed in
        place; equal timestamps (a batch put together) are parsed once."""
        blob, stamp = self._blob(), self._timestamp_parser
        last_raw: Any = _UNSET
        last_stamp: Any = None
        for i, r in enumerate(items):
            try:
                data = blob(r[_DATA])
                raw = r[_TS]
                if raw is not last_raw and (type(raw) is not type(last_raw) or raw != last_raw):
                    last_stamp, last_raw = stamp(raw), raw
                n = len(r)
                if r[_SEQ] is None or r[_PK] is None or (n != 4 and (n != 5 or r.get(_ENC) is None)):
                    raise _Slow
            except Exception:  # a record the fast path does not know (or a bug in it): botocore's own parser
                items[i] = None if r is None else self._parse_shape(record_shape, r)
                continue
            r[_DATA] = data
            r[_TS] = last_stamp
        return items


class LeanEventStreamJSONParser(_LeanRecords, EventStreamJSONParser):  # type: ignore[misc]
    """botocore's event-stream parser for the ``json`` protocol, records of ``SubscribeToShardEvent``s
    decoded in place."""


class LeanJSONParser(_LeanRecords, JSONParser):  # type: ignore[misc]
    """botocore's ``json`` protocol parser, GetRecords' records decoded in place."""

    EVENT_STREAM_PARSER_CLS = LeanEventStreamJSONParser


class LeanParserFactory(ResponseParserFactory):  # type: ignore[misc]
    """botocore's parser factory, with ``LeanJSONParser`` for the ``json`` protocol (defaults such as a
    ``timestamp_parser`` are passed to every parser, as botocore's factory does)."""

    def create_parser(self, protocol_name: str) -> Any:
        """The parser for ``protocol_name`` (botocore's own, unless it is ``json``)."""
        cls = LeanJSONParser if protocol_name == "json" else PROTOCOL_PARSERS[protocol_name]
        return cls(**self._defaults)
