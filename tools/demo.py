"""``make demo`` (``python -m tools.demo [--quick] [--out reports/demo]``): the whole system on the emulators.

The dev environment of ``cdk.json``, a producer and a fleet running dev's processor journaled; the fleet
scales out, in, restarts rolling, loses a lease holder to SIGKILL and drains; then the processor's table is
checked, Spark runs on what landed in S3, and ``<out>`` gets ``summary.json``, ``ownership.png``, ``lag.png``.
Each phase waits on its event, then holds for a person to watch (``--quick``, the test's: none, a 4 s lease).
Everything started is stopped at the end, also on Ctrl-C or SIGTERM; working files stay in ``<out>/work``.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any, Final

from tools.cli import Parser
from tools.demo_dev import Crash, DemoNames, DemoProcessor, load_environment, scan_items
from tools.demo_report import format_summary, raw_counts, write_report
from tools.demo_spark import SparkStep
from tools.emulators import AwsEndpoints, Emulators
from tools.fleet.runner import Fleet, FleetSettings
from tools.fleet.scenarios import Log, every_shard_since, formed, wait_for
from tools.fleet.scenarios import Timing as Waits

__all__ = ["FULL", "QUICK", "Demo", "Timing", "main"]

REPO: Final = Path(__file__).resolve().parents[1]
PROCESSOR: Final = "tools.demo_processor:journaled"  # the environment's processor (DEMO_PROCESSOR), journaled
KEYS: Final = 20  # distinct partition keys the producer writes
#: GetRecords limit per call: with 10,000 (the default) a whole failover backlog comes back in one call and
#: MillisBehindLatest is 0 at every sample.
MAX_RECORDS: Final = 25


@dataclass(frozen=True)
class Timing:
    """How long phases hold and how fast things tick (``fleet``'s shards, lease duration: dev's or below)."""

    fleet: FleetSettings
    warmup: float = 15.0
    settle: float = 12.0
    lease_duration: float | None = None
    raw_max_age: float = 5.0
    progress_every: float = 10.0


FULL: Final = Timing(FleetSettings(rate=50.0, metrics_interval=2.0))
QUICK: Final = Timing(
    FleetSettings(rate=40.0, scan_interval=0.5, inbox_poll_interval=0.1, metrics_interval=1.0),
    warmup=0.0,
    settle=0.0,
    lease_duration=4.0,
    raw_max_age=2.0,
    progress_every=5.0,
)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    """SIGTERM/SIGHUP, handled like Ctrl-C."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


class Demo:
    """One run. :meth:`run` does the work; :meth:`cleanup` (always called) stops whatever was started."""

    def __init__(self, timing: Timing, out: Path) -> None:
        self.env = load_environment("dev")
        self.names = DemoNames.of(self.env)
        self.processor = DemoProcessor.of(self.env, self.names)
        self.timing = timing
        self.lease_duration = timing.lease_duration or self.env.consumer.lease_duration_seconds
        self.out = out
        self.work = out / "work"
        self.began = time.time()
        self.emulators: Emulators | None = None
        self.fleet: Fleet | None = None
        self.spark: SparkStep | None = None
        self._quiet = threading.Event()  # set: no more progress lines
        self._step = 0

    def step(self, title: str) -> None:
        """Print the next phase's numbered title."""
        self._step += 1
        print(f"\n[{time.time() - self.began:5.1f}s] {self._step}. {title}", flush=True)

    def say(self, text: str) -> None:
        """Print one line of the current phase."""
        print(f"  {text}", flush=True)

    def run(self) -> dict[str, Any]:
        """Every phase, then the report; returns the summary."""
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        self.processor.check_importable()
        self.step("start the local emulators (kinesis-local, moto server)")
        self.emulators = Emulators().start()
        aws = self.emulators.endpoints
        self.say(f"kinesis {aws.kinesis_endpoint}, everything else {aws.aws_endpoint}")
        self.step(f"create what the {self.env.name} environment has (cdk.json)")
        fleet, dlq_url = self._create_resources(aws)
        self.step(f"start the producer and the first worker ({self.processor.entry_point})")
        self.spark = SparkStep(self.work)  # its JVM starts now (slow) and waits, idle, for the fleet's output
        fleet.start_producer()
        threading.Thread(target=self._tick, args=(fleet, aws), daemon=True, name="demo-progress").start()
        extra = self._worker_extra(dlq_url)
        fleet.start_worker("w1", extra)
        self._until_formed(fleet, "w1 delivers every shard")
        time.sleep(self.timing.warmup)
        crash = self._fleet_phases(fleet, extra)

        self.step("stop producing, let the fleet drain, stop it gracefully")
        fleet.stop_producer()
        drained = fleet.wait_drained(timeout=60)
        self.say(f"every produced record delivered: {drained}")
        live = fleet.live_workers()
        fleet.stop_all()  # SIGTERM: each flushes, checkpoints and hands over
        codes = {w: fleet.procs[w].returncode for w in live}
        fleet.mark(f"fleet stopped (exit codes {codes})")
        self._quiet.set()

        self.step(f"check the processor's table {self.processor.table} against what was produced")
        processor = self.processor.check(aws.client("dynamodb"), fleet, crash)
        check, refused, probe = processor["check"], processor["refused"], processor["probe"]
        self.say(
            f"{check['rows']:,} rows for {check['keys_produced']:,} keys produced; each key's newest record: "
            f"{check['each_key_newest']}; refused writes: {refused['older_than_stored']} older than the stored "
            f"record, {refused['stale_epoch']} from a stale epoch; stale-epoch probe refused: {probe.get('refused')}"
        )

        self.step("compact and aggregate what landed in S3 (Spark, local[2])")
        s3, raw, curated = aws.client("s3"), self.names.raw_bucket, self.names.curated_bucket
        lake = self.work / "lake"
        if not (objects := _download(s3, raw, f"{self.names.raw_prefix}/", lake / "raw")):
            raise RuntimeError(f"nothing landed in the raw bucket; see the worker logs in {fleet.workdir}")
        self.say(f"downloaded {objects} raw objects from s3://{raw}/{self.names.raw_prefix}/")
        with (self.work / "produced.jsonl").open("w", encoding="utf-8") as f:
            for shard, seq, _ in fleet.produced:
                print(json.dumps({"stream": fleet.stream, "shard_id": shard, "sequence_number": seq}), file=f)
        spark = self.spark.run()
        uploaded = sum(_upload(s3, curated, lake / folder, folder) for folder in ("curated", "metrics"))
        self.say(f"uploaded {uploaded} curated and metrics files to s3://{curated}/")
        queue = aws.client("sqs").get_queue_attributes(
            QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
        )
        self.step("report")
        context = {
            "environment": self.env.name,
            "names": asdict(self.names),
            "settings": {
                "shards": fleet.settings.shards,
                "lease_duration_s": self.lease_duration,
                "get_records_limit": MAX_RECORDS,
                "timing": asdict(replace(self.timing, fleet=fleet.settings)),  # with the rate and idle time
            },
            "exit_codes": codes,
            "waits_timed_out": fleet.timeouts,
            "processor": processor,
            "dead_lettered": int(queue["Attributes"]["ApproximateNumberOfMessages"]),
            "raw": raw_counts(lake / "raw"),
            "curated": spark.pop("curated"),
            "spark": spark,  # the compaction's and aggregation's counts and seconds
        }
        return write_report(context, fleet, crash, drained, self.out)

    def _create_resources(self, aws: AwsEndpoints) -> tuple[Fleet, str]:
        """The fleet (its stream and tables) and the rest of the environment; returns the fleet and the DLQ URL."""
        names, env, t, p = self.names, self.env, self.timing, self.processor
        stream = env.streams[0]
        settings = replace(t.fleet, shards=stream.shard_count, lease_duration=self.lease_duration)
        self.fleet = fleet = Fleet(
            aws,
            self.work / "fleet",
            settings,
            "demo",
            stream_name=stream.name,
            lease_table_name=names.lease_table,
            checkpoint_table_name=names.checkpoint_table,
            keys=KEYS,
            began=self.began,
        )
        url = str(aws.client("sqs").create_queue(QueueName=names.dead_letter_queue)["QueueUrl"])
        for bucket in (names.raw_bucket, names.curated_bucket):
            aws.client("s3").create_bucket(Bucket=bucket)
        p.create_table(aws.client("dynamodb"))
        self.say(f"stream {stream.name}: {stream.shard_count} shards")
        self.say(
            f"processor {p.entry_point} from {env.consumer.processor_project}/, its table {p.table} "
            f"(key {p.partition_key!r}, name passed as {p.table_variable})"
        )
        local = [name for what, name in asdict(names).items() if what.endswith(("table", "queue", "bucket"))]
        self.say(f"named by CDK in AWS, so derived from the application name here: {', '.join(local)}")
        lease = f"lease duration {self.lease_duration:g}s"
        if t.lease_duration is not None:
            lease += f" (demo override; {env.name} has {env.consumer.lease_duration_seconds:g}s)"
        self.say(
            f"application {names.application}, {lease}, on failure: {env.consumer.on_failure}, producer "
            f"{t.fleet.rate:g} records/s, GetRecords limit {MAX_RECORDS}, idle time between reads {t.fleet.idle_time:g}s"
        )
        return fleet, url

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
            "CONSUMER_MAX_RECORDS": str(MAX_RECORDS),  # catching up takes several reads: the lag shows
        }

    def _fleet_phases(self, fleet: Fleet, extra: dict[str, str]) -> Crash:
        """Scale out, scale in, a rolling restart and a crash, each waited for; returns the crash."""
        t, log = self.timing, Log()
        standby = self.env.scaling.standby_tasks
        n_shards = fleet.settings.shards
        target = max(2, min(self.env.scaling.max_tasks, n_shards + standby))
        self.step(f"scale out: 1 -> {target} workers ({n_shards} shards, {standby} standby)")
        for i in range(2, target + 1):
            fleet.start_worker(f"w{i}", extra)
        self._until_formed(fleet, f"{target} workers share the shards")
        time.sleep(t.settle)

        self.step(f"scale in: {target} -> {target - 1} workers (SIGTERM to a lease holder)")
        leaving = fleet.lease_holder([w for w in fleet.live_workers() if w != "w1"])
        left = log.stop(fleet, [leaving])
        self._until_formed(fleet, f"the shards flow again without {leaving}", since=left)
        time.sleep(t.settle)

        self.step("rolling restart: start a new worker, then SIGTERM an old one, one at a time")
        for serial, old in enumerate(fleet.live_workers(), start=target + 1):
            fleet.start_worker(f"w{serial}", extra)
            fleet.wait_registered(f"w{serial}")
            # Every old worker scans once after the new one registered, so has seen it alive (not visible
            # from outside: with a standby, owning a share is no sign of it).
            time.sleep(2 * t.fleet.scan_interval + 0.5)
            gone = log.stop(fleet, [old])
            self._until_formed(fleet, f"the shards flow again without {old}", since=gone)
        time.sleep(t.settle)

        self.step(f"crash: SIGKILL a lease holder (its leases expire after {self.lease_duration:g}s)")
        victim = fleet.lease_holder(fleet.live_workers())
        killed_at = log.signal(fleet, [victim], signal.SIGKILL)
        fleet.wait_exit(victim)
        self._until_formed(fleet, f"the survivors took {victim}'s shards over", since=killed_at)
        time.sleep(t.settle)
        return Crash(victim, killed_at, tuple(log.owners[victim]))

    def _until_formed(self, fleet: Fleet, what: str, since: float = 0.0) -> None:
        """Wait (bounded) until the live workers deliver every shard after ``since`` and share them evenly."""
        live = set(fleet.live_workers())

        def event() -> bool:
            return every_shard_since(fleet, since, live) and formed(fleet, live)

        wait_for(fleet, Waits(poll=0.2), what, event)

    def _tick(self, fleet: Fleet, aws: AwsEndpoints) -> None:
        """A progress line every ``progress_every`` seconds until :attr:`_quiet` is set."""
        ddb, s3 = aws.client("dynamodb"), aws.client("s3")
        while not self._quiet.wait(self.timing.progress_every):
            try:
                leases = sorted(
                    f"{i['shard_id']['S'].replace('shardId-', '')}: {i.get('owner', {}).get('S', '-')} "
                    f"(epoch {i['epoch']['N']})"
                    for i in scan_items(ddb, self.names.lease_table)
                    if "shard_id" in i
                )
                line = (
                    f"produced {len(fleet.produced):,}, delivered {len(fleet.deliveries()):,}, raw objects "
                    f"{len(_objects(s3, self.names.raw_bucket))}, table rows "
                    f"{len(scan_items(ddb, self.processor.table)):,}; leases {', '.join(leases)}"
                )
            except Exception as exc:  # the emulators may be going away; progress is best effort
                line = f"(status unavailable: {type(exc).__name__})"
            if not self._quiet.is_set():
                print(f"  [{time.time() - self.began:5.1f}s]   .. {line}", flush=True)

    def cleanup(self) -> None:
        """Stop the progress lines, the producer, Spark, the workers and the emulators; bounded in time."""
        self._quiet.set()
        if self.spark is not None:
            self.spark.stop()
        if self.fleet is not None:
            self.fleet.stop_producer()
            self.fleet.stop_all()
        if self.emulators is not None:
            self.emulators.stop()


def _objects(s3: Any, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [obj for page in pages for obj in page.get("Contents", [])]


def _download(s3: Any, bucket: str, prefix: str, into: Path) -> int:
    """Copy every object under ``prefix`` to ``into/<key without the prefix>``; returns how many there were."""
    objects = _objects(s3, bucket, prefix)
    for obj in objects:
        target = into / obj["Key"].removeprefix(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, obj["Key"], str(target))
    return len(objects)


def _upload(s3: Any, bucket: str, root: Path, prefix: str) -> int:
    """Upload the files under ``root`` (not Hadoop's ``.crc`` side files) to ``prefix/<relative path>``."""
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and not p.name.endswith(".crc")]
    for path in files:
        s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")
    return len(files)


def main(argv: list[str] | None = None) -> int:
    """Run the demo; 0 when its summary is ok, 130 when interrupted."""
    parser = Parser(prog="python -m tools.demo", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short phases and a 4 s lease (the test's)")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "demo", help="report folder")
    args = parser.parse_args(argv)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        parser.error(f"--out {args.out}: {exc.strerror}")
    demo = Demo(QUICK if args.quick else FULL, args.out.resolve())
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        summary = demo.run()
        print("\n" + format_summary(summary), flush=True)
        code = 0 if summary["ok"] else 1
    except KeyboardInterrupt as exc:
        print(f"\ninterrupted ({str(exc) or 'Ctrl-C'}): stopping everything the demo started", flush=True)
        code = 130
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # the cleanup below is bounded; let it finish
        demo.cleanup()
        print(f"stopped ({time.time() - demo.began:.0f}s in all)", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
