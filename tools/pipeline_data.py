"""Raw sink objects (docs/data-format.md, format 2) with redeliveries, retries and malformed lines.

The lines are the sink's, byte for byte (``tests/unit/test_raw_format.py``), plus binary payloads, payloads a
re-serializing sink would change and a few lines ending in CR-LF. Used by the pipeline benchmark and the Spark
tests; it reports what a correct compaction must produce."""

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
_START = datetime(2026, 11, 21, 0, 0, tzinfo=UTC)
_STREAM = "orders"
_AGGREGATED_RATE = 0.05  # records that are a KPL aggregate's next sub-record
_CRLF_RATE = 0.001
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

_Row = tuple[str, int, str]  # sequence number, sub-sequence number, line


@dataclass(frozen=True)
class RawSpec:
    """What to generate: ``records`` distinct Kinesis records spread over ``hours`` hours."""

    records: int
    duplicate_rate: float = 0.02
    retry_rate: float = 0.0
    malformed: int = 0
    shards: int = 4
    hours: int = 2
    batch_size: int = 5_000
    base64_rate: float = 0.01
    exotic_rate: float = 0.01


@dataclass(frozen=True)
class GeneratedRaw:
    """What was written: line counts and the answer a correct compaction gives."""

    root: Path
    lines: int
    distinct_records: int
    distinct_events: int
    malformed: int
    objects: int


@dataclass
class _Objects:
    """Writes batches as raw objects, each followed by its redelivered tail."""

    root: Path
    spec: RawSpec
    rng: random.Random
    malformed_left: int
    lines: int = 0
    count: int = 0

    def write(self, shard_id: str, hour: datetime, rows: list[_Row], redeliver: bool = True) -> None:
        """One object of ``rows`` (and now and then a malformed line) in ``hour``'s partition."""
        body = [line for _, _, line in rows]
        if self.malformed_left > 0 and self.rng.random() < 0.5:
            body.insert(len(body) // 2, _MALFORMED_LINES[self.malformed_left % len(_MALFORMED_LINES)])
            self.malformed_left -= 1
        (first_seq, first_sub, _), (last_seq, last_sub, _) = rows[0], rows[-1]
        folder = self.root / f"stream={_STREAM}" / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{shard_id}_{first_seq}_{first_sub}_{last_seq}_{last_sub}.jsonl.gz"
        path.write_bytes(gzip.compress(("\n".join(body) + "\n").encode(), compresslevel=1))
        self.lines += len(body)
        self.count += 1
        if redeliver and self.spec.duplicate_rate > 0:
            # A redelivery after a failover: the batch's tail again from the next epoch, in its own object.
            tail = rows[-max(1, round(len(rows) * self.spec.duplicate_rate)) :]
            again = [(s, b, line.replace('"epoch":1,', '"epoch":2,', 1)) for s, b, line in tail]
            self.write(shard_id, hour, again, redeliver=False)


def _base64_field(data: bytes) -> str:
    return '"data_base64":"' + base64.b64encode(data).decode("ascii") + '"'


def _data_field(rng: random.Random, spec: RawSpec, event: int, amount: int) -> tuple[str, bool]:
    """The line's payload member, and whether the payload is a JSON text (with an event id to read)."""
    roll = rng.random()
    if roll < spec.base64_rate:
        blob = b"\x00\xff" + f'{{"event_id": "ev-{event}", "amount": {amount}}}'.encode()
        return _base64_field(blob), False
    if roll < spec.base64_rate + spec.exotic_rate:
        raw, is_json = _EXOTIC[rng.randrange(len(_EXOTIC))]
        raw = raw.replace(b"{n}", str(event).encode())
        if is_json:
            return '"data":' + json.dumps(raw.decode(), ensure_ascii=False), True
        return _base64_field(raw), False
    payload = f'{{"event_id": "ev-{event}", "amount": {amount}, "sku": "sku-{amount % 97}"}}'
    return '"data":"' + payload.replace('"', '\\"') + '"', True


def generate_raw(root: Path, spec: RawSpec) -> GeneratedRaw:
    """Write ``spec.records`` distinct records (plus duplicates and malformed lines) under ``root``."""
    rng = random.Random(7)
    out = _Objects(root, spec, rng, spec.malformed)
    events = 0
    # (hour, event id) of each record, or its sequence numbers for a binary payload (no event id to read);
    # tracked only with producer retries
    distinct: set[tuple[datetime, int | str]] = set()
    per_shard, extra = divmod(spec.records, spec.shards)
    for shard in range(spec.shards):
        shard_id = f"shardId-{shard:012d}"
        count = per_shard + (1 if shard < extra else 0)
        step = spec.hours * 3_600_000 / max(count, 1)
        batch: list[_Row] = []  # in arrival order, split at hour boundaries like the sink
        batch_hour = _START
        seq_index = sub = 0
        for i in range(count):
            arrival = _START + timedelta(milliseconds=int(i * step))
            hour = arrival.replace(minute=0, second=0, microsecond=0)
            if batch and (hour != batch_hour or len(batch) >= spec.batch_size):
                out.write(shard_id, batch_hour, batch)
                batch = []
            batch_hour = hour
            if sub == 0 or rng.random() >= _AGGREGATED_RATE:
                seq_index += 1
                sub = 0
            else:
                sub += 1
            if events > 0 and rng.random() < spec.retry_rate:
                event = events - 1  # a producer retry: same event, new sequence number
            else:
                event = events
                events += 1
            amount = rng.randrange(1, 100_000)
            data_field, is_json = _data_field(rng, spec, event, amount)
            seq = str(_SEQ_BASE + shard * 10**30 + seq_index * 1000)
            if spec.retry_rate > 0:
                distinct.add((hour, event if is_json else f"{seq}/{sub}"))
            line = (
                f'{{"v":2,"stream":"{_STREAM}","shard_id":"{shard_id}","sequence_number":"{seq}",'
                f'"sub_sequence_number":{sub},"partition_key":"pk-{amount % 1000}",'
                f'"arrival_time":"{arrival.isoformat(timespec="milliseconds")[:-6]}Z","epoch":1,{data_field}}}'
            )
            if rng.random() < _CRLF_RATE:
                line += "\r"  # a valid line ending in CR-LF (hand-written, not by the sink)
            batch.append((seq, sub, line))
        if batch:
            out.write(shard_id, batch_hour, batch)
    return GeneratedRaw(
        root=root,
        lines=out.lines,
        distinct_records=spec.records,
        distinct_events=len(distinct) if spec.retry_rate > 0 else spec.records,
        malformed=spec.malformed - out.malformed_left,
        objects=out.count,
    )
