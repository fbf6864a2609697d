"""What the demo creates, named and sized after the dev environment of ``cdk.json`` (validated by
:mod:`stacks.config`). Streams have fixed names in the CDK app; the tables, the queue and the buckets get
CloudFormation-generated names in AWS, so locally they are derived from the application name."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from consumer.errors import ProcessorLoadError
from consumer.loader import load_processor
from stacks.config import EnvironmentSettings, load_environments

__all__ = ["CDK_JSON", "DemoNames", "DemoProcessor", "load_environment"]

CDK_JSON: Final = Path(__file__).resolve().parents[1] / "cdk.json"


def load_environment(name: str = "dev") -> EnvironmentSettings:
    """The validated settings of environment ``name`` in ``cdk.json``."""
    return load_environments(json.loads(CDK_JSON.read_text(encoding="utf-8"))["context"]["environments"])[
        name
    ]


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
    processor_table: str

    @classmethod
    def of(cls, env: EnvironmentSettings) -> DemoNames:
        """The names for ``env``."""
        app = env.consumer.application
        return cls(
            application=app,
            streams=tuple(s.name for s in env.streams),
            lease_table=f"{app}-leases",
            checkpoint_table=f"{app}-checkpoints",
            dead_letter_queue=f"{app}-dlq",
            raw_bucket=f"{app.lower().replace('_', '-')}-raw",
            curated_bucket=f"{app.lower().replace('_', '-')}-curated",
            raw_prefix=env.consumer.raw_prefix,
            processor_table=f"{app}-processor",
        )


@dataclass(frozen=True)
class DemoProcessor:
    """The processor the environment deploys from its project folder, and its own table (made as the state
    stack does: a string partition key, the name passed to the task in ``table_variable``)."""

    entry_point: str
    project: Path
    table: str
    table_variable: str
    partition_key: str

    @classmethod
    def of(cls, env: EnvironmentSettings, names: DemoNames) -> DemoProcessor:
        """``env``'s processor; like dev's, it must have a project and a table."""
        c, t = env.consumer, env.consumer.processor_table
        if c.processor_project is None or t is None:
            raise SystemExit(
                f"error: {env.name} has no consumer.processor_project or processor_table, as dev has"
            )
        project = (CDK_JSON.parent / c.processor_project).resolve()
        return cls(c.processor, project, names.processor_table, t.variable, t.partition_key)

    def check_importable(self) -> None:
        """Load the entry point as a worker will (the project's folder on the path), or exit with one line."""
        sys.path.insert(0, str(self.project))
        try:
            load_processor(self.entry_point)
        except ProcessorLoadError as exc:
            raise SystemExit(f"error: {exc}; run `make setup`") from exc

    def worker_env(self) -> dict[str, str]:
        """A worker's variables beyond the consumer's: ``DEMO_PROCESSOR``, the project on ``PYTHONPATH`` (as the
        image puts a project without a wheel) and the table's name in its variable (as the task definition)."""
        path = os.pathsep.join(p for p in (str(self.project), os.environ.get("PYTHONPATH", "")) if p)
        return {"DEMO_PROCESSOR": self.entry_point, "PYTHONPATH": path, self.table_variable: self.table}
