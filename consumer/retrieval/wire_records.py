"""Records as GetRecords and SubscribeToShard return them, and the user records in them: one ``Record`` per
plain record, the user records of a KPL aggregate (de-aggregated as ``aws-kinesis-agg`` does)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import TypedDict

import aws_kinesis_agg.deaggregator  # noqa: F401 - puts the library's protobuf modules on the import path
from aws_kinesis_agg import messages_pb2
from google.protobuf.message import DecodeError

from consumer.records import Record

__all__ = ["KPL_MAGIC", "WireRecord", "to_records"]


class WireRecord(TypedDict):
    """One record as GetRecords and SubscribeToShard return it (botocore has already decoded ``Data`` and
    parsed the timestamp). Readers turn these into ``Record`` objects once; nothing copies them before."""

    SequenceNumber: str
    PartitionKey: str
    Data: bytes
    ApproximateArrivalTimestamp: datetime


KPL_MAGIC = b"\xf3\x89\x9a\xc2"  # the first bytes of every KPL-aggregated record
_DIGEST_SIZE = 16  # MD5 of the protobuf, at the end


def to_records(stream: str, shard_id: str, wire: Sequence[WireRecord]) -> list[Record]:
    """The user records in ``wire``, in order: one ``Record`` built per record, straight from the wire dict.

    Only records that start with the KPL magic bytes are de-aggregated; a record whose aggregate does not
    check out (digest, protobuf) is delivered as it is, as ``aws-kinesis-agg`` does.
    """
    out: list[Record] = []
    append = out.append
    build = tuple.__new__  # Record's own fields, without the Python-level constructor call per record
    for w in wire:
        data = w["Data"]
        if data[:4] == KPL_MAGIC:
            out.extend(_deaggregate(stream, shard_id, w))
            continue
        fields = (
            stream,
            shard_id,
            w["SequenceNumber"],
            0,
            w["PartitionKey"],
            data,
            w["ApproximateArrivalTimestamp"],
            False,
            None,
        )
        append(build(Record, fields))
    return out


def _deaggregate(stream: str, shard_id: str, w: WireRecord) -> list[Record]:
    """The user records of one KPL aggregate: magic, protobuf ``AggregatedRecord`` (the definitions shipped
    with ``aws-kinesis-agg``), MD5 digest of the protobuf. Sub-records are read from the protobuf as bytes
    (the library's own iterator base64-encodes each one into a dict first, which costs more than the rest)."""
    data = w["Data"]
    body, digest = data[len(KPL_MAGIC) : -_DIGEST_SIZE], data[-_DIGEST_SIZE:]
    plain = [_plain(stream, shard_id, w)]
    if (
        len(data) <= len(KPL_MAGIC) + _DIGEST_SIZE
        or hashlib.md5(body, usedforsecurity=False).digest() != digest
    ):
        return plain
    aggregate = messages_pb2.AggregatedRecord()
    try:
        aggregate.ParseFromString(body)
        keys, hash_keys = list(aggregate.partition_key_table), list(aggregate.explicit_hash_key_table)
        seq, arrival = w["SequenceNumber"], w["ApproximateArrivalTimestamp"]
        build = tuple.__new__
        if not hash_keys:  # the usual case: no explicit hash keys at all
            return [
                build(
                    Record,
                    (stream, shard_id, seq, i, keys[r.partition_key_index], r.data, arrival, True, None),
                )
                for i, r in enumerate(aggregate.records)
            ]
        return [
            build(
                Record,
                (
                    stream,
                    shard_id,
                    seq,
                    i,
                    keys[r.partition_key_index],
                    r.data,
                    arrival,
                    True,
                    hash_keys[r.explicit_hash_key_index] if r.HasField("explicit_hash_key_index") else None,
                ),
            )
            for i, r in enumerate(aggregate.records)
        ]
    except (DecodeError, IndexError):  # not an aggregate after all: delivered as it is, like the library does
        return plain


def _plain(stream: str, shard_id: str, w: WireRecord) -> Record:
    return Record(
        stream,
        shard_id,
        w["SequenceNumber"],
        0,
        w["PartitionKey"],
        w["Data"],
        w["ApproximateArrivalTimestamp"],
    )
