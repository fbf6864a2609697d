"""The checkpoint table deleted under a running worker (``python -m consumer run``): a missing table cannot
come back by retrying, so the worker ends with exit code 2 and one ``error:`` line that names the table that
is gone (it once named the lease table, which was still there). And ``create-tables`` among more than a
page of tables."""

from __future__ import annotations

import pytest

from .support import (
    Names,
    create_stream,
    make_names,
    put_records,
    read_journal,
    run_cli,
    spawn_worker,
    wait_until,
)

pytestmark = pytest.mark.integration


def test_a_deleted_checkpoint_table_ends_the_worker_naming_it(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    put_records(kinesis_client, names.stream, [f"r{i}".encode() for i in range(3)])
    journal = tmp_path / "journal.jsonl"
    proc = spawn_worker(emulators, names, "w", journal)
    try:
        wait_until(
            lambda: sum(e["k"] == "d" for e in read_journal(journal)) >= 3, timeout=30, what="deliveries"
        )
        dynamodb_client.delete_table(TableName=names.checkpoint_table)
        put_records(kinesis_client, names.stream, [b"after"])  # its checkpoint finds the table gone
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert code == 2
    lines = journal.with_suffix(".w.log").read_text().splitlines()
    error = lines[-1]
    assert error.startswith("error: ") and f"'{names.checkpoint_table}'" in error, error


def test_create_tables_finds_tables_past_the_first_page_of_list_tables(
    emulators, dynamodb_client, unique_name
) -> None:
    """ListTables answers 100 names a page; a wrongly keyed table past the first page must still be refused
    by name (it was taken for missing, and its creation failed with ResourceInUseException)."""
    while len(dynamodb_client.list_tables(Limit=100)["TableNames"]) < 100:  # a first page full of others
        dynamodb_client.create_table(
            TableName=unique_name("filler"),
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
    wrong, checkpoints = f"zz{unique_name('wrong')}"[:63], f"zz{unique_name('cps')}"[:63]
    dynamodb_client.create_table(
        TableName=wrong,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    assert wrong not in dynamodb_client.list_tables()["TableNames"]  # past the first page
    names = Names("unused", wrong, checkpoints)
    refused = run_cli(
        emulators, names, "create-tables", "--lease-table", wrong, "--checkpoint-table", checkpoints
    )
    assert refused.returncode == 2, refused.stderr
    error = refused.stderr.strip().splitlines()[-1]
    assert error.startswith("error: ") and f"'{wrong}' has the key id" in error and "lease_key" in error, (
        error
    )
    again = run_cli(
        emulators, names, "create-tables", "--lease-table", checkpoints, "--checkpoint-table", wrong
    )
    assert again.returncode == 2 and "--checkpoint-table" in again.stderr, (
        again.stderr
    )  # refused before anything is created
    ready = run_cli(
        emulators,
        names,
        "create-tables",
        "--lease-table",
        checkpoints,
        "--checkpoint-table",
        checkpoints + "x",
    )
    assert ready.returncode == 0 and ready.stdout.startswith("tables ready"), ready.stderr
