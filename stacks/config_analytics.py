"""The analytics settings: EMR Serverless capacity, the compaction schedule and runs, S3 lifecycle.

Read from ``cdk.json`` by :mod:`stacks.config`; every error names the setting it rejects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stacks.config_reader import ConfigError, Section

__all__ = ["AnalyticsSettings", "read_analytics"]

# EventBridge Scheduler: cron(minutes hours day-of-month month day-of-week year), or rate(value unit).
_CRON = re.compile(r"^cron\(\S+( \S+){5}\)$")
_RATE = re.compile(r"^rate\((?P<value>[1-9]\d*) (?P<unit>minutes?|hours?|days?)\)$")


@dataclass(frozen=True)
class AnalyticsSettings:
    """EMR Serverless capacity, the compaction schedule and S3 lifecycle."""

    emr_release_label: str
    max_vcpu: int
    max_memory_gb: int
    compaction_schedule: str
    compaction_enabled: bool
    compaction_retries: int
    #: Each scheduled run covers the last this many full UTC hours, rewriting only the stale ones.
    compaction_lookback_hours: int
    job_timeout_minutes: int
    raw_expiration_days: int
    curated_infrequent_access_days: int


def read_analytics(a: Section) -> AnalyticsSettings:
    settings = AnalyticsSettings(
        emr_release_label=a.text("emr_release_label", re.compile(r"^emr-(spark-)?\d+\.\d+\.\d+$")),
        max_vcpu=a.integer("max_vcpu", 1),
        max_memory_gb=a.integer("max_memory_gb", 1),
        compaction_schedule=_schedule(a),
        compaction_enabled=a.flag("compaction_enabled"),
        compaction_retries=a.integer("compaction_retries", 0, 10),
        # At most 12: well within raw_expiration_days (at least 1), so a run never looks for expired raw objects.
        compaction_lookback_hours=a.integer("compaction_lookback_hours", 1, 12),
        job_timeout_minutes=a.integer("job_timeout_minutes", 5, 1440),
        raw_expiration_days=a.integer("raw_expiration_days", 1),
        curated_infrequent_access_days=a.integer("curated_infrequent_access_days", 30),
    )
    a.done()
    return settings


def _schedule(a: Section) -> str:
    """An EventBridge Scheduler expression Scheduler accepts: six cron fields, or a whole rate and its unit."""
    value = a.text("compaction_schedule")
    rate = _RATE.match(value)
    if _CRON.match(value) or (rate and (rate["value"] == "1") == (not rate["unit"].endswith("s"))):
        return value
    raise ConfigError(
        f"{a.path}.compaction_schedule",
        f"{value!r} is not a schedule EventBridge Scheduler accepts: use cron(minutes hours day-of-month month "
        "day-of-week year), e.g. cron(15 * * * ? *), or rate(value unit), e.g. rate(1 hour) or rate(30 minutes)",
    )
