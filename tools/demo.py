"""``make demo``: the whole system on local emulators, end to end, in a few minutes.

    python -m tools.demo [--quick] [--env dev] [--out reports/demo] [--lease-duration S]

1. starts kinesis-local and moto server on 127.0.0.1 (tools/emulators/);
2. creates the stream(s), the lease and checkpoint tables, the dead-letter queue, the raw and curated
   buckets and the processor's own table (``consumer.processor_table``), named and sized after the ``dev``
   environment in ``cdk.json``;
3. starts a producer (20 partition keys, each written over and over), and one worker running the
   environment's processor (``consumer.processor`` from ``consumer.processor_project``; dev's is
   ``examples/latest-per-key``: the raw S3 sink plus each key's newest record in the table, fenced by epoch),
   with a delivery journal mixed in (``tools.demo_processor``);
4. scales the fleet out (1 -> 3 workers: one per shard plus a standby), scales it in (SIGTERM to a lease
   holder), restarts it rolling (new worker first, then SIGTERM the old one), and SIGKILLs a lease holder;
5. stops producing, lets the fleet drain and stops it gracefully (every buffer is flushed to S3);
6. checks the processor's table against what was produced (one item per key, each its key's newest record),
   counts the writes it refused (from its log events) and probes its epoch fence once (``tools.demo_latest``);
7. downloads what landed in S3 and runs the Spark compaction and aggregation jobs on it locally
   (local[2]; no hadoop-aws here), then checks that every produced record is in the curated table exactly once;
8. prints a summary and writes ``<out>/summary.json``, ``<out>/ownership.png`` (who owned which shard
   when) and ``<out>/lag.png`` (MillisBehindLatest per shard from the workers' EMF metric lines).

Everything it starts (emulators, workers, Spark's JVM) is stopped at the end, also on Ctrl-C or SIGTERM.
Working files (journals, worker logs and metrics, the local copy of the lake) stay in ``<out>/work``.
Each phase waits on its event (the fleet formed, a hand-off finished, the crashed worker's shards taken over),
then holds a few seconds for a person to watch; ``--quick`` holds none and uses a 4 s lease (the dev value,
10 s, is used otherwise), so the SIGKILL failover takes seconds; the integration test runs it.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Final

from stacks.config import EnvironmentSettings
from tools.demo_config import DemoNames, DemoProcessor, load_environment
from tools.demo_latest import count_refusals, create_table, probe_stale_epoch, scan_items, table_check
from tools.demo_report import Crash, format_summary, write_report
from tools.demo_spark import SparkStep
from tools.demo_support import (
    DemoFleet,
    ProgressTicker,
    count_objects,
    download_prefix,
    lease_owners,
    stop_workers,
    upload_tree,
)
from tools.emulators import Emulators
from tools.fleet.runner import DEFAULT_IDLE_TIME, DEFAULT_INBOX_POLL, FleetSettings
from tools.fleet.scenarios import Timing as Waits
from tools.fleet.scenarios import formed, hold, wait_for

__all__ = ["FULL", "QUICK", "Demo", "Timing", "main"]

REPO: Final = Path(__file__).resolve().parents[1]
PROCESSOR: Final = "tools.demo_processor:journaled"  # the environment's processor (DEMO_PROCESSOR), journaled
#: Distinct partition keys the producer writes (rounded up to a multiple of its batch of records per 0.1 s).
KEYS: Final = 20
#: GetRecords limit per call. At the demo's rates the fleet keeps up either way; with 10,000 (the default)
#: a whole failover backlog comes back in one call and MillisBehindLatest is 0 at every sample.
MAX_RECORDS: Final = 25


@dataclass(frozen=True)
class Timing:
    """How long each phase lasts and how fast things tick. ``lease_duration`` None = the environment's.

    Each phase first waits on its event (the fleet formed, a hand-off finished, the survivors took a crashed
    worker's shards over), bounded; ``warmup`` and ``settle`` are held on after it, for a person to watch."""

    warmup: float
    settle: float
    rate: float
    lease_duration: float | None
    scan_interval: float
    inbox_poll_interval: float
    metrics_interval: float
    raw_max_age: float
    progress_every: float


FULL: Final = Timing(
    warmup=15.0,
    settle=12.0,
    rate=50.0,
    lease_duration=None,
    scan_interval=1.0,
    inbox_poll_interval=DEFAULT_INBOX_POLL,
    metrics_interval=2.0,
    raw_max_age=5.0,
    progress_every=10.0,
)
QUICK: Final = Timing(
    warmup=0.0,
    settle=0.0,
    rate=40.0,
    lease_duration=4.0,
    scan_interval=0.5,
    inbox_poll_interval=0.1,
    metrics_interval=1.0,
    raw_max_age=2.0,
    progress_every=5.0,
)


class _Interrupted(KeyboardInterrupt):
    """SIGTERM/SIGHUP, handled like Ctrl-C."""


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    raise _Interrupted(signal.Signals(signum).name)


class Demo:
    """One run. :meth:`run` does the work; :meth:`cleanup` (always called) stops whatever was started."""

    def __init__(self, env: EnvironmentSettings, timing: Timing, out: Path) -> None:
        self.env = env
        self.names = DemoNames.of(env)
        self.processor = DemoProcessor.of(env, self.names)
        self.timing = timing
        self.lease_duration = timing.lease_duration or env.consumer.lease_duration_seconds
        self.out = out
        self.work = out / "work"
        self.began = time.time()
        self.emulators: Emulators | None = None
        #: The bound on each phase's wait for its event, and the waits that timed out (in the summary).
        self.waits = Waits(warmup=0.0, settle=0.0, step_timeout=60.0, poll=0.2)
        self.timed_out: list[str] = []
        self.fleet: DemoFleet | None = None
        self.spark: SparkStep | None = None
        self.ticker: ProgressTicker | None = None
        self._step = 0
        self._producing = False

    # -- output ------------------------------------------------------------------------------------
    def step(self, title: str) -> None:
        self._step += 1
        print(f"\n[{time.time() - self.began:5.1f}s] {self._step}. {title}", flush=True)

    def say(self, text: str) -> None:
        print(f"  {text}", flush=True)

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        if self.work.exists():
            shutil.rmtree(self.work)
        self.work.mkdir(parents=True)
        self.processor.check_importable()
        self.step("start the local emulators (kinesis-local, moto server)")
        self.emulators = Emulators()
        self.emulators.start()
        endpoints = self.emulators.endpoints
        self.say(f"kinesis {endpoints.kinesis_endpoint}, everything else {endpoints.aws_endpoint}")

        self.step(f"create what the {self.env.name} environment has (cdk.json)")
        dlq_url = self._create_resources(endpoints)
        self.step(f"start the producer and the first worker ({self.processor.entry_point})")
        fleet = self.fleet
        assert fleet is not None
        # Spark's JVM (~8 s to start) starts now and waits, idle, for the fleet's output.
        self.spark = SparkStep(self.work).start()
        fleet.start_producer()
        self._producing = True
        self.ticker = ProgressTicker(self.timing.progress_every, self._status, self.began).start()
        extra = self._worker_extra(dlq_url)
        fleet.start_worker("w1", extra)
        self._until_formed(fleet, "w1 delivers every shard")
        hold(self.timing.warmup)

        crash = self._fleet_phases(fleet, extra)

        self.step("stop producing, let the fleet drain, stop it gracefully")
        fleet.stop_producer()
        self._producing = False
        drained = fleet.wait_drained(timeout=60)
        self.say(f"every produced record delivered: {drained}")
        codes = stop_workers(fleet, timeout=self.env.consumer.shutdown_deadline_seconds + 10)
        fleet.mark(f"fleet stopped (exit codes {codes})")
        self.ticker.stop()
        processor = self._processor_output(endpoints, fleet, crash)

        self.step("compact and aggregate what landed in S3 (Spark, local[2])")
        lake = self.work / "lake"
        s3 = endpoints.client("s3")
        objects = download_prefix(s3, self.names.raw_bucket, f"{self.names.raw_prefix}/", lake)
        self.say(
            f"downloaded {objects} raw objects from s3://{self.names.raw_bucket}/{self.names.raw_prefix}/"
        )
        spark = self._run_spark(lake, fleet)
        uploaded = upload_tree(s3, self.names.curated_bucket, lake / "curated", "curated")
        uploaded += upload_tree(s3, self.names.curated_bucket, lake / "metrics", "metrics")
        self.say(f"uploaded {uploaded} curated and metrics files to s3://{self.names.curated_bucket}/")
        dead_lettered = int(
            endpoints.client("sqs").get_queue_attributes(
                QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]["ApproximateNumberOfMessages"]
        )

        self.step("report")
        return write_report(
            context={
                "environment": self.env.name,
                "names": asdict(self.names),
                "settings": {
                    "shards": fleet.settings.shards,
                    "lease_duration_s": self.lease_duration,
                    "producer_rate_per_s": self.timing.rate,
                    "get_records_limit": MAX_RECORDS,
                    "idle_time_between_reads_s": fleet.settings.idle_time,
                    "timing": asdict(self.timing),
                },
                "exit_codes": codes,
                "waits_timed_out": self.timed_out,
                "processor": processor,
                "dead_lettered": dead_lettered,
            },
            fleet=fleet,
            crash=crash,
            raw_root=lake / self.names.raw_prefix,
            spark=spark,
            drained=drained,
            began=self.began,
            out=self.out,
        )

    def _create_resources(self, endpoints: Any) -> str:
        names, settings = self.names, self.env
        streams = settings.streams
        first = streams[0]
        self.fleet = DemoFleet(
            endpoints,
            self.work / "fleet",
            FleetSettings(
                shards=first.shard_count,
                lease_duration=self.lease_duration,
                rate=self.timing.rate,
                scan_interval=self.timing.scan_interval,
                inbox_poll_interval=self.timing.inbox_poll_interval,
                idle_time=DEFAULT_IDLE_TIME,  # at most 4 GetRecords/s per idle shard, as in production
                metrics_interval=self.timing.metrics_interval,
            ),
            "demo",
            stream_name=first.name,
            lease_table_name=names.lease_table,
            checkpoint_table_name=names.checkpoint_table,
            keep_stdout=True,
        )
        self.fleet.began = self.began
        self.fleet.key_count = KEYS
        self.say(f"stream {first.name}: {first.shard_count} shards")
        kinesis = endpoints.client("kinesis")
        for other in streams[1:]:
            kinesis.create_stream(StreamName=other.name, ShardCount=other.shard_count)
            self.say(f"stream {other.name}: {other.shard_count} shards (created; the demo uses the first)")
        url = str(endpoints.client("sqs").create_queue(QueueName=names.dead_letter_queue)["QueueUrl"])
        s3 = endpoints.client("s3")
        for bucket in (names.raw_bucket, names.curated_bucket):
            s3.create_bucket(Bucket=bucket)
        p = self.processor
        if p.table is not None and p.partition_key is not None:
            create_table(endpoints.client("dynamodb"), p.table, p.partition_key)
        line = f"processor {p.entry_point}"
        if self.env.consumer.processor_project is not None:
            line += f" from {self.env.consumer.processor_project}/"
        if p.table is not None:
            line += f", its table {p.table} (key {p.partition_key!r}, name passed as {p.table_variable})"
        self.say(line)
        self.say("named by CDK in AWS, so fixed local names derived from the application name:")
        for what, name in names.derived().items():
            self.say(f"  {what:<17} {name}")
        lease = f"lease duration {self.lease_duration:g}s"
        if self.timing.lease_duration is not None:
            lease += f" (demo override; {settings.name} has {settings.consumer.lease_duration_seconds:g}s)"
        self.say(
            f"application {names.application}, {lease}, on failure: {settings.consumer.on_failure}, "
            f"producer {self.timing.rate:g} records/s, GetRecords limit {MAX_RECORDS}, "
            f"idle time between reads {self.fleet.settings.idle_time if self.fleet else DEFAULT_IDLE_TIME:g}s"
        )
        return url

    def _worker_extra(self, dlq_url: str) -> dict[str, str]:
        consumer = self.env.consumer
        return {
            **self.processor.worker_env(),
            "CONSUMER_APPLICATION": self.names.application,
            "CONSUMER_PROCESSOR": PROCESSOR,
            "CONSUMER_ON_FAILURE": consumer.on_failure,
            "CONSUMER_DLQ_URL": dlq_url,
            "CONSUMER_SHUTDOWN_DEADLINE_SECONDS": f"{consumer.shutdown_deadline_seconds:g}",
            "CONSUMER_RAW_BUCKET": self.names.raw_bucket,
            "CONSUMER_RAW_PREFIX": consumer.raw_prefix,
            "CONSUMER_RAW_MAX_AGE_SECONDS": f"{self.timing.raw_max_age:g}",
            # Small GetRecords batches: catching up after a failover takes several reads, so the lag shows.
            "CONSUMER_MAX_RECORDS": str(MAX_RECORDS),
        }

    def _processor_output(self, endpoints: Any, fleet: DemoFleet, crash: Crash) -> dict[str, Any]:
        """What the processor did beside the raw sink: its table against the produced records, the writes
        it refused (its log events) and, for the latest-per-key example, one stale-epoch probe."""
        p = self.processor
        out: dict[str, Any] = {
            "entry_point": p.entry_point,
            "project": self.env.consumer.processor_project,  # as cdk.json has it
            "table": p.table,
            "refused": count_refusals(sorted(fleet.workdir.glob("*.log")), crash.at, crash.shards),
        }
        if p.table is None or p.partition_key is None:
            return out
        self.step(f"check the processor's table {p.table} against what was produced")
        ddb = endpoints.client("dynamodb")
        items = scan_items(ddb, p.table)
        out["rows"] = len(items)
        if not p.entry_point.startswith("latest_per_key."):
            self.say(f"{len(items):,} rows (the newest-per-key check knows only examples/latest-per-key)")
            return out
        check = table_check(items, fleet.produced_records(), p.partition_key)
        out["check"] = check
        self.say(
            f"{check['rows']:,} rows for {check['keys_produced']:,} keys produced; each key's newest record: "
            f"{check['each_key_newest']} ({check['not_newest']} not, {check['missing_keys']} missing, "
            f"{check['unexpected_keys']} unexpected)"
        )
        refused = out["refused"]
        self.say(
            f"refused writes (from the log events): {refused['older_than_stored']} older than the stored "
            f"record ({refused['older_after_crash']} on the SIGKILLed worker's shards after the kill), "
            f"{refused['stale_epoch']} from a stale epoch"
        )
        probe = probe_stale_epoch(ddb, p.table, p.partition_key, items)
        out["probe"] = probe
        if probe["probed"]:
            self.say(
                f"probe: key {probe['key']} as epoch {probe['write_epoch']} of {probe['shard']} (stored by epoch "
                f"{probe['stored_epoch']}): refused {probe['refused']}, item unchanged {probe['item_unchanged']}"
            )
        return out

    def _fleet_phases(self, fleet: DemoFleet, extra: dict[str, str]) -> Crash:
        t = self.timing
        standby = self.env.scaling.standby_tasks
        n_shards = fleet.settings.shards
        target = max(2, min(self.env.scaling.max_tasks, n_shards + standby))
        self.step(f"scale out: 1 -> {target} workers ({n_shards} shards, {standby} standby)")
        for i in range(2, target + 1):
            fleet.start_worker(f"w{i}", extra)
        self._until_formed(fleet, f"{target} workers share the shards")
        hold(t.settle)

        self.step(f"scale in: {target} -> {target - 1} workers (SIGTERM to a lease holder)")
        candidates = [w for w in fleet.live_workers() if w != "w1"]
        leaving = (fleet.lease_holders(candidates) or candidates)[0]
        left = fleet.signal(leaving, signal.SIGTERM)
        fleet.wait_exit(leaving, timeout=self.env.consumer.shutdown_deadline_seconds + 10)
        self._until_formed(fleet, f"the shards flow again without {leaving}", since=left)
        hold(t.settle)

        self.step("rolling restart: start a new worker, then SIGTERM an old one, one at a time")
        serial = target + 1
        for old in fleet.live_workers():
            new = f"w{serial}"
            serial += 1
            fleet.start_worker(new, extra)
            fleet.wait_registered(new)
            # One scan of every old worker after the new one registered: they have seen it alive (a worker's
            # view of the fleet is not visible from outside; with a standby, owning a share is no sign of it).
            time.sleep(2 * t.scan_interval + 0.5)
            gone = fleet.signal(old, signal.SIGTERM)
            fleet.wait_exit(old, timeout=self.env.consumer.shutdown_deadline_seconds + 10)
            self._until_formed(fleet, f"the shards flow again without {old}", since=gone)
        hold(t.settle)

        self.step(f"crash: SIGKILL a lease holder (its leases expire after {self.lease_duration:g}s)")
        live = fleet.live_workers()
        victim = (fleet.lease_holders(live) or live)[0]
        shards = fleet.last_owners(time.time()).get(victim, [])
        killed_at = fleet.signal(victim, signal.SIGKILL)
        fleet.wait_exit(victim)
        self._until_formed(fleet, f"the survivors took {victim}'s shards over", since=killed_at)
        hold(t.settle)
        return Crash(victim, killed_at, tuple(shards))

    def _until_formed(self, fleet: DemoFleet, what: str, since: float = 0.0) -> None:
        """Wait (bounded) until every shard delivered after ``since`` by a live worker and the live workers
        share the shards evenly (:func:`tools.fleet.scenarios.formed`); a time-out is kept for the summary."""
        live = set(fleet.live_workers())

        def event() -> bool:
            fresh = {d.shard for d in fleet.deliveries() if d.t > since and d.worker in live}
            return len(fresh) >= fleet.settings.shards and formed(fleet, live)

        wait_for(fleet, self.waits, what, event, self.timed_out)

    def _status(self) -> str:
        fleet = self.fleet
        if fleet is None or self.emulators is None:
            return "starting"
        endpoints = self.emulators.endpoints
        owners = lease_owners(endpoints.client("dynamodb"), self.names.lease_table)
        raw = count_objects(endpoints.client("s3"), self.names.raw_bucket)
        held = ", ".join(
            f"{shard.replace('shardId-', '')}: {owner or '-'} (epoch {epoch})"
            for shard, (owner, epoch) in sorted(owners.items())
        )
        table = self.processor.table
        rows = ""
        if table is not None:
            pages = endpoints.client("dynamodb").get_paginator("scan")
            count = sum(page["Count"] for page in pages.paginate(TableName=table, Select="COUNT"))
            rows = f", table rows {count:,}"
        return (
            f"produced {len(fleet.produced):,}, delivered {len(fleet.deliveries()):,}, "
            f"raw objects {raw}{rows}; leases {held}"
        )

    # -- Spark -------------------------------------------------------------------------------------
    def _run_spark(self, lake: Path, fleet: DemoFleet) -> dict[str, Any]:
        hours = sorted(
            f"{m.group(1)}T{m.group(2)}"
            for p in (lake / self.names.raw_prefix).glob("stream=*/date=*/hour=*")
            if (m := re.search(r"date=(\d{4}-\d{2}-\d{2})/hour=(\d{2})$", p.as_posix()))
        )
        if not hours:
            raise RuntimeError(f"nothing landed in the raw bucket; see the worker logs in {fleet.workdir}")
        produced = self.work / "produced.jsonl"
        with produced.open("w", encoding="utf-8") as f:
            for shard, seq, _ in fleet.produced:
                f.write(
                    json.dumps({"stream": fleet.stream, "shard_id": shard, "sequence_number": seq}) + "\n"
                )
        if self.names.raw_prefix != "raw":  # the Spark step reads <lake>/raw
            (lake / "raw").symlink_to(lake / self.names.raw_prefix, target_is_directory=True)
        self.say(f"hours {hours[0]} .. {hours[-1]} (UTC)")
        assert self.spark is not None
        return self.spark.run(
            {"lake": str(lake), "start": hours[0], "end": hours[-1], "produced": str(produced)}
        )

    # -- cleanup -----------------------------------------------------------------------------------
    def cleanup(self) -> None:
        """Stop the ticker, the producer, Spark, the workers and the emulators; bounded in time."""
        if self.ticker is not None:
            self.ticker.stop()
        if self.spark is not None:
            self.spark.stop()
        if self.fleet is not None:
            if self._producing:
                self.fleet.stop_producer()
            stop_workers(self.fleet, timeout=8.0)
        if self.emulators is not None:
            self.emulators.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.demo", description=(__doc__ or "").split("\n\n", maxsplit=1)[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="short phases and a 4 s lease (the test uses it)"
    )
    parser.add_argument("--env", default="dev", help="environment of cdk.json to mirror (default: dev)")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "demo", help="report folder")
    args = parser.parse_args(argv)
    timing = QUICK if args.quick else FULL
    demo = Demo(load_environment(args.env), timing, args.out.resolve())
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)
    code = 1
    try:
        summary = demo.run()
        print("\n" + format_summary(summary), flush=True)
        code = 0 if summary["ok"] else 1
    except KeyboardInterrupt as exc:
        reason = str(exc) or "Ctrl-C"
        print(f"\ninterrupted ({reason}): stopping everything the demo started", flush=True)
        code = 130
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # the cleanup below is bounded; let it finish
        demo.cleanup()
        print(f"stopped ({time.time() - demo.began:.0f}s in all)", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
