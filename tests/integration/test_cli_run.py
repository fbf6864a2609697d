"""A worker started by the real CLI with settings that are allowed but worth a warning: a 3 s shutdown
deadline, polling faster than Kinesis allows, and a processor that returns a value from process_records."""

from __future__ import annotations

import json

import pytest

from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput

from .support import (
    create_stream,
    make_names,
    put_records,
    spawn_worker,
    stop_process,
    stored_checkpoints,
    wait_until,
)

pytestmark = pytest.mark.integration


class ReturnsValue(BaseProcessor):
    """Returns the number of records, as if that meant something to the consumer."""

    def process_records(self, data: ProcessRecordsInput) -> int:  # type: ignore[override]
        return len(data.records)


def test_allowed_but_suspicious_settings_run_with_one_warning_each(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    journal = tmp_path / "j.jsonl"
    proc = spawn_worker(
        emulators,
        names,
        "warned",
        journal,
        CONSUMER_PROCESSOR="tests.integration.test_cli_run:ReturnsValue",
        CONSUMER_SHUTDOWN_DEADLINE_SECONDS="3",
        CONSUMER_READS_PER_SECOND="6",  # over Kinesis's 5: warned, and throttled by the emulators' limits
    )
    try:
        for batch in range(3):  # several batches, so the warning could repeat
            last = put_records(kinesis_client, names.stream, [f"b{batch}-{i}".encode() for i in range(5)])[-1]
            wait_until(
                lambda last=last: (
                    stored_checkpoints(dynamodb_client, names.checkpoint_table).get(shard, (None,))[0]
                    == last["SequenceNumber"]
                ),
                timeout=20,
                what=f"batch {batch} checkpointed",
            )
    finally:
        code = stop_process(proc)
    log = journal.with_suffix(".warned.log").read_text()
    assert code == 0, log
    assert "Traceback" not in log
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    returned = [e for e in events if e.get("event") == "processor_return_value_ignored"]
    assert len(returned) == 1 and returned[0]["returned"] == "int"
    assert returned[0]["processor"] == "tests.integration.test_cli_run:ReturnsValue"
    warnings = [e["warning"] for e in events if e.get("event") == "config_warning"]
    assert len(warnings) == 1 and "CONSUMER_READS_PER_SECOND=6" in warnings[0]
