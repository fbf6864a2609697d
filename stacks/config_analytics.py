"""The analytics settings: EMR Serverless capacity, the compaction schedule and runs, S3 lifecycle.

Read from ``cdk.json`` by :mod:`stacks.config`; every error names the setting it rejects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stacks.config_reader import ConfigError, Section

__all__ = ["FIRST_SUPPORTED_RELEASE", "AnalyticsSettings", "read_analytics"]

# EventBridge Scheduler: cron(minutes hours day-of-month month day-of-week year), or rate(value unit).
_CRON = re.compile(r"^cron\((?P<fields>\S+( \S+){5})\)$")
_RATE = re.compile(r"^rate\((?P<value>[1-9]\d*) (?P<unit>minutes?|hours?|days?)\)$")
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# Each cron field as the EventBridge cron reference lists it: name, values (lowest, highest, names) and wildcards.
_CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...], str], ...] = (
    ("minutes", 0, 59, (), ", - * /"),
    ("hours", 0, 23, (), ", - * /"),
    ("day-of-month", 1, 31, (), ", - * ? / L W"),
    ("month", 1, 12, _MONTHS, ", - * /"),
    ("day-of-week", 1, 7, _DAYS, ", - * ? L #"),
    ("year", 1970, 2199, (), ", - * /"),
)
_RELEASE = re.compile(r"^emr-(?:spark-)?(\d+)\.(\d+)\.(\d+)$")
#: The first EMR release the Spark jobs run on: emr-spark-8.0.0 (Spark 4.0.2), the release docs/infrastructure.md
#: names; the jobs use Spark 4 types (VARIANT), which the EMR 7 releases (Spark 3.5) and older do not have.
FIRST_SUPPORTED_RELEASE = (8, 0, 0)


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
        emr_release_label=_release_label(a),
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


def _release_label(a: Section) -> str:
    """An EMR release label (``emr-spark-8.0.0``) no older than :data:`FIRST_SUPPORTED_RELEASE`."""
    value = a.text("emr_release_label", _RELEASE)
    match = _RELEASE.match(value)
    version = tuple(int(part) for part in match.groups()) if match else ()
    if version < FIRST_SUPPORTED_RELEASE:
        first = ".".join(map(str, FIRST_SUPPORTED_RELEASE))
        raise ConfigError(
            f"{a.path}.emr_release_label",
            f"{value!r} runs Spark 3 or older, and the jobs use Spark 4 types (VARIANT): use emr-spark-{first} "
            "(Spark 4.0) or a later release",
        )
    return value


def _schedule(a: Section) -> str:
    """An EventBridge Scheduler expression Scheduler accepts: six cron fields (see :func:`_cron_problem`), or a
    whole rate and its unit."""
    value = a.text("compaction_schedule")
    rate, cron = _RATE.match(value), _CRON.match(value)
    problem = _cron_problem(cron["fields"].split(" ")) if cron else None
    if (cron and problem is None) or (rate and (rate["value"] == "1") == (not rate["unit"].endswith("s"))):
        return value
    raise ConfigError(
        f"{a.path}.compaction_schedule",
        f"{value!r} is not a schedule EventBridge Scheduler accepts{f' ({problem})' if problem else ''}: use "
        "cron(minutes hours day-of-month month day-of-week year), e.g. cron(15 * * * ? *), or rate(value unit), "
        "e.g. rate(1 hour) or rate(30 minutes)",
    )


def _cron_problem(fields: list[str]) -> str | None:
    """Why EventBridge Scheduler would refuse these six cron fields, or None: each field holds only its values
    (numbers in its range, or the month's or weekday's three-letter names) and its wildcards (see
    ``_CRON_FIELDS``); ``?`` stands alone, in exactly one of day-of-month and day-of-week (the other one, or
    ``*``, picks the days)."""
    for text, (label, lowest, highest, names, wildcards) in zip(fields, _CRON_FIELDS, strict=True):
        bare = re.sub("|".join(names), "", text) if names else text
        if any(not (c.isdigit() or c in wildcards.split()) for c in bare):
            values = f"{lowest}-{highest}" + (f" or {names[0]}-{names[-1]}" if names else "")
            return f"the {label} field {text!r} may hold only {values} and the wildcards {wildcards}"
        if "?" in text and text != "?":
            return f"the {label} field {text!r}: ? stands alone"
        for element in text.split(","):
            for number in re.findall(r"\d+", element.split("/")[0].split("#")[0]):
                if not lowest <= int(number) <= highest:
                    return f"the {label} field {text!r}: {number} is not within {lowest}-{highest}"
    if (fields[2] == "?") == (fields[4] == "?"):
        return "? goes in exactly one of day-of-month and day-of-week, e.g. cron(0 2 * * ? *) or cron(0 2 ? * MON *)"
    return None
