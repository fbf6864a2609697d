"""Generate raw sink objects (see docs/data-format.md) with duplicates, retries and malformed lines.

The generator writes what the raw S3 sink writes (format 2; ``tests/unit/test_raw_format.py`` checks the lines
byte for byte against the sink's encoder): gzip-compressed JSON lines under
``stream=<s>/date=YYYY-MM-DD/hour=HH/<shard>_<first_seq>_<first_sub>_<last_seq>_<last_sub>.jsonl.gz``.
Besides plain JSON payloads it writes binary ones and, at ``exotic_rate``, the payloads a re-serializing sink
would change (40-digit integers, 20-digit decimals, ``1e400``, duplicate keys, escapes, CR-LF whitespace, a
byte-order mark, ``NaN``), and a few valid lines ending in CR-LF. It is used by the pipeline benchmark and by
the Spark end-to-end tests, and reports what a correct compaction must produce so both can check the result.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

__all__ = ["GeneratedRaw", "RawSpec", "generate_raw"]

_SEQ_BASE = 496 * 10**53  # 56 digits, like real Kinesis sequence numbers
_GOOD = (
    '"v":2,"stream":"orders","shard_id":"shardId-000000000000","sequence_number":"1",'
    '"sub_sequence_number":0,"arrival_time":"2026-11-21T00:00:00.000Z","epoch":1'
)
_MALFORMED_LINES = (
    "this is not json",
    '{"stream": "orders", "shard_id": "shardId-000000000000"',
    '["an", "array"]',
    '{"v":2,"stream":"orders","shard_id":"shardId-000000000000","sequence_number":"12x",'
    '"sub_sequence_number":0,"partition_key":"pk","arrival_time":"2026-11-21T00:00:00.000Z",'
    '"epoch":1,"data":"1"}',
    "{" + _GOOD + ',"partition_key":{"an":"object"},"data":"1"}',
    "{" + _GOOD + ',"partition_key":"pk","data_base64":"YWJ"}',
    "{" + _GOOD + ',"partition_key":"pk","data":"1","epoch":1}',  # a duplicate key
    "{" + _GOOD + ',"partition_key":"pk\r","data":"1"}',  # a raw CR inside a string
)
#: Payloads a sink that parses and re-serializes would change: (text or bytes, is a JSON text).
_EXOTIC: tuple[tuple[bytes, bool], ...] = (
    (
        b'{"event_id": "ev-{n}", "big": 1234567890123456789012345678901234567890,'
        b' "pi": 3.141592653589793238462643383279502884197}',
        True,
    ),
    (b'{"event_id":"ev-{n}","amount":0.12345678901234567890,"huge":1e400,"neg":-0}', True),
    (b'{"event_id":"ev-{n}","a":1,"a":2}', False),  # duplicate keys: kept as bytes
    (b'{"event_id":"ev-{n}","name":"caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ /"}', True),
    ('{"event_id":"ev-{n}","name":"café 😀 \u2028"}'.encode(), True),
    (b'\r\n {\r\n\t"event_id" : "ev-{n}" ,\r\n "n" : [ 1 , -0 , 1E+2 ]\r\n}\r\n ', True),
    (b'{"event_id": "ev-{n}", "x": NaN}', False),
    (b'\xef\xbb\xbf{"event_id": "ev-{n}"}', False),
)


@dataclass(frozen=True)
class RawSpec:
    """What to generate: ``records`` distinct Kinesis records spread over ``hours`` hours."""

    records: int
    duplicate_rate: float = 0.02
    retry_rate: float = 0.0
    malformed: int = 0
    shards: int = 4
    hours: int = 2
    start: datetime = datetime(2026, 11, 21, 0, 0, tzinfo=UTC)
    stream: str = "orders"
    batch_size: int = 5_000
    base64_rate: float = 0.01
    exotic_rate: float = 0.01
    crlf_rate: float = 0.001
    aggregated_rate: float = 0.05
    seed: int = 7


@dataclass(frozen=True)
class GeneratedRaw:
    """What was written: line counts and the answer a correct compaction gives."""

    root: Path
    lines: int
    distinct_records: int
    distinct_events: int
    malformed: int
    objects: int


def _text_field(text: str) -> str:
    return '"data":' + json.dumps(text, ensure_ascii=False)


def _base64_field(data: bytes) -> str:
    return '"data_base64":"' + base64.b64encode(data).decode("ascii") + '"'


def _seq(shard: int, index: int) -> str:
    return str(_SEQ_BASE + shard * 10**30 + index * 1000)


def _iso(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def _object_key(root: Path, stream: str, shard_id: str, hour: datetime, rows: list[tuple[str, int]]) -> Path:
    first_seq, first_sub = rows[0]
    last_seq, last_sub = rows[-1]
    folder = root / f"stream={stream}" / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"
    return folder / f"{shard_id}_{first_seq}_{first_sub}_{last_seq}_{last_sub}.jsonl.gz"


def generate_raw(root: Path, spec: RawSpec) -> GeneratedRaw:
    """Write ``spec.records`` distinct records (plus duplicates and malformed lines) under ``root``."""
    rng = random.Random(spec.seed)
    per_shard = spec.records // spec.shards
    extra = spec.records - per_shard * spec.shards
    span_ms = spec.hours * 3_600_000
    lines = 0
    objects = 0
    malformed_left = spec.malformed
    event_counter = 0
    binary_records = 0
    json_events: set[tuple[datetime, int]] = set()  # (hour, event id), tracked only with retries
    for shard in range(spec.shards):
        shard_id = f"shardId-{shard:012d}"
        count = per_shard + (1 if shard < extra else 0)
        # (hour, [(seq, sub, line)]) batches in arrival order, split at hour boundaries like the sink
        batch: list[tuple[str, int, str]] = []
        batch_hour: datetime | None = None
        seq_index = 0
        sub = 0
        step = span_ms / max(count, 1)

        def flush(
            rows: list[tuple[str, int, str]], hour: datetime, epoch_dupes: bool, shard_id: str = shard_id
        ) -> None:
            nonlocal lines, objects, malformed_left
            body = [r[2] for r in rows]
            if malformed_left > 0 and rng.random() < 0.5:
                body.insert(len(body) // 2, _MALFORMED_LINES[malformed_left % len(_MALFORMED_LINES)])
                malformed_left -= 1
            path = _object_key(root, spec.stream, shard_id, hour, [(r[0], r[1]) for r in rows])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(gzip.compress(("\n".join(body) + "\n").encode(), compresslevel=1))
            lines += len(body)
            objects += 1
            if epoch_dupes and spec.duplicate_rate > 0:
                # A redelivery after a failover: the tail of the batch again, from the next epoch,
                # in its own object (different first bounds, same hour partition).
                tail = max(1, round(len(rows) * spec.duplicate_rate))
                redelivered = [(s, b, ln.replace('"epoch":1,', '"epoch":2,', 1)) for s, b, ln in rows[-tail:]]
                flush(redelivered, hour, epoch_dupes=False)

        for i in range(count):
            arrival = spec.start + timedelta(milliseconds=int(i * step))
            hour = arrival.replace(minute=0, second=0, microsecond=0)
            if batch and (hour != batch_hour or len(batch) >= spec.batch_size):
                assert batch_hour is not None
                flush(batch, batch_hour, epoch_dupes=True)
                batch = []
            batch_hour = hour
            if sub == 0 or rng.random() >= spec.aggregated_rate:
                seq_index += 1
                sub = 0
            else:
                sub += 1
            is_retry = event_counter > 0 and rng.random() < spec.retry_rate
            if is_retry:
                event = event_counter - 1  # a producer retry: same event, new sequence number
            else:
                event = event_counter
                event_counter += 1
            amount = rng.randrange(1, 100_000)
            roll = rng.random()
            if roll < spec.base64_rate:
                blob = b"\x00\xff" + f'{{"event_id": "ev-{event}", "amount": {amount}}}'.encode()
                data_field, is_json = _base64_field(blob), False
            elif roll < spec.base64_rate + spec.exotic_rate:
                raw, is_json = _EXOTIC[rng.randrange(len(_EXOTIC))]
                raw = raw.replace(b"{n}", str(event).encode())
                data_field = _text_field(raw.decode()) if is_json else _base64_field(raw)
            else:
                payload = f'{{"event_id": "ev-{event}", "amount": {amount}, "sku": "sku-{amount % 97}"}}'
                data_field, is_json = '"data":"' + payload.replace('"', '\\"') + '"', True
            if is_json:
                if spec.retry_rate > 0:
                    json_events.add((hour, event))
            else:
                binary_records += 1  # no event id can be read from a binary payload
            seq = _seq(shard, seq_index)
            line = (
                f'{{"v":2,"stream":"{spec.stream}","shard_id":"{shard_id}","sequence_number":"{seq}",'
                f'"sub_sequence_number":{sub},"partition_key":"pk-{amount % 1000}",'
                f'"arrival_time":"{_iso(arrival)}","epoch":1,{data_field}}}'
            )
            if rng.random() < spec.crlf_rate:
                line += "\r"  # a valid line ending in CR-LF (hand-written, not by the sink)
            batch.append((seq, sub, line))
        if batch and batch_hour is not None:
            flush(batch, batch_hour, epoch_dupes=True)
    return GeneratedRaw(
        root=root,
        lines=lines,
        distinct_records=spec.records,
        distinct_events=spec.records if spec.retry_rate == 0 else len(json_events) + binary_records,
        malformed=spec.malformed - malformed_left,
        objects=objects,
    )
