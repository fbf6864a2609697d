"""What the demo creates, named and sized after an environment of ``cdk.json`` (``dev`` by default).

``cdk.json`` is read directly and validated by :mod:`stacks.config`, which does not import aws_cdk. Streams
have fixed physical names in the CDK app; the tables, the queue and the buckets get CloudFormation-generated
names in AWS, so locally they are derived from the application name (``<application>-leases`` ...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from stacks.config import EnvironmentSettings, load_environments

__all__ = ["CDK_JSON", "DemoNames", "load_environment"]

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
        )

    def derived(self) -> dict[str, str]:
        """The names CDK generates in AWS and the demo chooses locally."""
        return {
            "lease table": self.lease_table,
            "checkpoint table": self.checkpoint_table,
            "dead-letter queue": self.dead_letter_queue,
            "raw bucket": self.raw_bucket,
            "curated bucket": self.curated_bucket,
        }
