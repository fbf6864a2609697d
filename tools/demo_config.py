"""What the demo creates, named and sized after an environment of ``cdk.json`` (``dev`` by default).

``cdk.json`` is read directly and validated by :mod:`stacks.config`, which does not import aws_cdk. Streams
have fixed physical names in the CDK app; the tables, the queue and the buckets get CloudFormation-generated
names in AWS, so locally they are derived from the application name (``<application>-leases`` ...).

:class:`DemoProcessor` is what the environment deploys as its processor: ``consumer.processor`` (the entry
point), ``consumer.processor_project`` (the folder of its code, relative to ``cdk.json``; ``make setup`` installs
dev's editable into ``.venv``) and ``consumer.processor_table`` (the processor's own DynamoDB table, created
like the state stack does: string partition key ``partition_key``, its name passed as ``variable``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from stacks.config import EnvironmentSettings, load_environments

__all__ = ["CDK_JSON", "DemoNames", "DemoProcessor", "load_environment"]

CDK_JSON: Final = Path(__file__).resolve().parents[1] / "cdk.json"


def load_environment(name: str = "dev", path: Path = CDK_JSON) -> EnvironmentSettings:
    """The validated settings of environment ``name`` from ``cdk.json``'s ``context.environments``."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    environments = load_environments(raw.get("context", {}).get("environments"))
    if name not in environments:
        raise SystemExit(
            f"error: no environment {name!r} in {path}; known: {', '.join(sorted(environments))}"
        )
    return environments[name]


@dataclass(frozen=True)
class DemoNames:
    """Local resource names: the streams as configured, the rest derived from the application name."""

    application: str
    streams: tuple[str, ...]
    lease_table: str
    checkpoint_table: str
    dead_letter_queue: str
    raw_bucket: str
    curated_bucket: str
    raw_prefix: str
    processor_table: str | None = None  # cdk.json consumer.processor_table, when the environment has one

    @classmethod
    def of(cls, env: EnvironmentSettings) -> DemoNames:
        app = env.consumer.application
        return cls(
            application=app,
            streams=tuple(s.name for s in env.streams),
            lease_table=f"{app}-leases",
            checkpoint_table=f"{app}-checkpoints",
            dead_letter_queue=f"{app}-dlq",
            raw_bucket=f"{app}-raw".lower().replace("_", "-"),
            curated_bucket=f"{app}-curated".lower().replace("_", "-"),
            raw_prefix=env.consumer.raw_prefix,
            processor_table=None if env.consumer.processor_table is None else f"{app}-processor",
        )

    def derived(self) -> dict[str, str]:
        """The names CDK generates in AWS and the demo chooses locally."""
        return {
            "lease table": self.lease_table,
            "checkpoint table": self.checkpoint_table,
            "dead-letter queue": self.dead_letter_queue,
            "raw bucket": self.raw_bucket,
            "curated bucket": self.curated_bucket,
        } | ({"processor table": self.processor_table} if self.processor_table else {})


@dataclass(frozen=True)
class DemoProcessor:
    """The environment's processor as the demo runs it: entry point, project folder and own table."""

    entry_point: str
    project: Path | None
    table: str | None
    table_variable: str | None
    partition_key: str | None

    @classmethod
    def of(cls, env: EnvironmentSettings, names: DemoNames, path: Path = CDK_JSON) -> DemoProcessor:
        c = env.consumer
        t = c.processor_table
        return cls(
            entry_point=c.processor,
            project=None if c.processor_project is None else (path.parent / c.processor_project).resolve(),
            table=names.processor_table,
            table_variable=None if t is None else t.variable,
            partition_key=None if t is None else t.partition_key,
        )

    def check_importable(self) -> None:
        """Import the entry point's module here (with the project's folder on the path, as the workers get
        it); exit with one line when it cannot be imported (``make setup`` installs dev's project)."""
        if self.project is not None and str(self.project) not in sys.path:
            sys.path.insert(0, str(self.project))
        module, _, name = self.entry_point.partition(":")
        try:
            target: object = importlib.import_module(module)
            for part in name.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError) as exc:
            where = f" (consumer.processor_project {self.project})" if self.project else ""
            raise SystemExit(
                f"error: consumer.processor {self.entry_point!r}{where} cannot be loaded: {exc}; "
                "run `make setup`"
            ) from exc

    def worker_env(self) -> dict[str, str]:
        """What a worker needs beyond the consumer's settings: ``DEMO_PROCESSOR`` for
        :func:`tools.demo_processor.journaled`, the project's folder on ``PYTHONPATH`` (as the image puts a
        project without a wheel) and the table's name in its variable (as the task definition does)."""
        env = {"DEMO_PROCESSOR": self.entry_point}
        if self.project is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(self.project), os.environ.get("PYTHONPATH", "")) if p
            )
        if self.table is not None and self.table_variable is not None:
            env[self.table_variable] = self.table
        return env
