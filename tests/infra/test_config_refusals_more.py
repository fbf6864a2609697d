"""Settings synth accepted and AWS then refused at deploy (or the jobs failed on), each now refused by name:
a cron expression EventBridge Scheduler rejects, an EMR release without Spark 4, a log retention CloudWatch does
not offer (it was silently rounded up), and an environment name the GitHub deploy roles' template refuses or
whose role name IAM's 64 characters cannot hold. The loaders are called directly: no synth."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from cfnlint.decode import decode

from stacks.config import ENVIRONMENT_NAME, LOG_RETENTION_DAYS, ConfigError, load_environments
from stacks.config_analytics import FIRST_SUPPORTED_RELEASE

from .conftest import REPO_ROOT

pytestmark = pytest.mark.infra


def _raw() -> dict[str, Any]:
    environments: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]["environments"]
    return environments


def _load_with(section: str, key: str, value: Any, env: str = "staging") -> Any:
    raw = copy.deepcopy(_raw())
    raw[env][section][key] = value
    return load_environments(raw)[env]


def _refused(section: str, key: str, value: Any, env: str = "staging") -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        _load_with(section, key, value, env)
    assert caught.value.setting == f"environments.{env}.{section}.{key}", caught.value
    assert "\n" not in str(caught.value)
    return caught.value


# -- analytics.compaction_schedule: what EventBridge Scheduler's cron reference allows -----------------------

ACCEPTED_CRONS = [
    "cron(15 * * * ? *)",  # cdk.json's
    "cron(0 18 ? * MON-FRI *)",
    "cron(0 0 1 1 ? *)",
    "cron(0/15 * * * ? *)",
    "cron(5,35 14 * JAN,MAR ? *)",
    "cron(0 8 1-15 * ? 2026-2030)",
    "cron(0 12 L * ? *)",
    "cron(0 9 15W * ? *)",
    "cron(0 9 ? * 6L *)",
    "cron(0 9 ? * 3#2 *)",
    "cron(0 2 ? * 1,7 */2)",
]


@pytest.mark.parametrize("expression", ACCEPTED_CRONS)
def test_cron_expressions_scheduler_accepts_are_accepted(expression: str) -> None:
    assert (
        _load_with("analytics", "compaction_schedule", expression).analytics.compaction_schedule == expression
    )


REFUSED_CRONS = [
    # (expression, words the message must hold)
    ("cron(0 2 * * * *)", "exactly one of day-of-month and day-of-week"),  # the Unix-cron habit
    ("cron(0 2 ? * ? *)", "exactly one of day-of-month and day-of-week"),
    ("cron(0 2 1 * MON *)", "exactly one of day-of-month and day-of-week"),
    ("cron(x x x x x x)", "the minutes field 'x'"),
    ("cron(0 2 * JANUARY ? *)", "the month field 'JANUARY'"),
    ("cron(0 2 ? * 1W *)", "the day-of-week field '1W'"),
    ("cron(0 2 * * ? 2026#1)", "the year field '2026#1'"),
    ("cron(0 2 ? * mon *)", "the day-of-week field 'mon'"),
    ("cron(0 2 1,? * ? *)", "? stands alone"),
    ("cron(60 2 * * ? *)", "60 is not within 0-59"),
    ("cron(0 24 * * ? *)", "24 is not within 0-23"),
    ("cron(0 2 0 * ? *)", "0 is not within 1-31"),
    ("cron(0 2 * 13 ? *)", "13 is not within 1-12"),
    ("cron(0 2 ? * 8 *)", "8 is not within 1-7"),
    ("cron(0 2 * * ? 1969)", "1969 is not within 1970-2199"),
]


@pytest.mark.parametrize(("expression", "words"), REFUSED_CRONS, ids=[c[0] for c in REFUSED_CRONS])
def test_cron_expressions_scheduler_rejects_are_refused_at_synth(expression: str, words: str) -> None:
    error = _refused("analytics", "compaction_schedule", expression)
    assert f"{expression!r} is not a schedule EventBridge Scheduler accepts" in str(error)
    assert words in str(error), error


# -- analytics.emr_release_label: Spark 4 or later ----------------------------------------------------------


def test_the_first_supported_release_is_the_one_the_docs_name() -> None:
    """docs/infrastructure.md names emr-spark-8.0.0 (Spark 4.0.2) as the release, and EMR 7 (Spark 3.5) as
    lacking the jobs' Spark 4 types: the minimum is that release, not a guess."""
    docs = (REPO_ROOT / "docs" / "infrastructure.md").read_text()
    first = ".".join(map(str, FIRST_SUPPORTED_RELEASE))
    assert f"`emr-spark-{first}` (the AWS runtime for Apache Spark 4.0.2)" in docs
    assert "EMR 7 releases (Spark 3.5) do not have" in docs


@pytest.mark.parametrize("label", ["emr-spark-8.0.0", "emr-spark-8.1.0", "emr-spark-10.0.0"])
def test_spark_4_releases_are_accepted(label: str) -> None:
    assert _load_with("analytics", "emr_release_label", label).analytics.emr_release_label == label


@pytest.mark.parametrize("label", ["emr-7.1.0", "emr-7.12.0", "emr-6.15.0", "emr-spark-7.9.0"])
def test_releases_without_spark_4_are_refused(label: str) -> None:
    error = _refused("analytics", "emr_release_label", label)
    assert f"{label!r} runs Spark 3 or older" in str(error) and "emr-spark-8.0.0" in str(error), error


# -- consumer.log_retention_days: one of CloudWatch's values, not rounded -----------------------------------


def test_the_allowed_retentions_are_cloudwatchs() -> None:
    """CloudWatch Logs' RetentionInDays values (PutRetentionPolicy), 1096 (3 years) and the 6-9 years included."""
    cloudwatch = [1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922]
    assert list(LOG_RETENTION_DAYS) == [*cloudwatch, 3288, 3653]


@pytest.mark.parametrize("days", [1096, 2192, 3288, 1, 3653])
def test_every_retention_cloudwatch_offers_is_accepted(days: int) -> None:
    assert _load_with("consumer", "log_retention_days", days, "dev").consumer.log_retention_days == days


@pytest.mark.parametrize("days", [15, 1095, 4000, 0, "30", 30.0])
def test_a_retention_cloudwatch_does_not_offer_is_refused_not_rounded(days: int) -> None:
    error = _refused("consumer", "log_retention_days", days, "dev")
    assert "1, 3, 5, 7, 14, 30" in str(error) and "1096" in str(error) and "3653" in str(error), error


def test_log_retention_days_is_documented() -> None:
    docs = (REPO_ROOT / "docs" / "infrastructure.md").read_text()
    (row,) = [line for line in docs.splitlines() if line.startswith("| `consumer.log_retention_days`")]
    assert "1096" in row and "3653" in row


# -- environment names: one rule for cdk.json and deploy/github-oidc-role.yaml ------------------------------


def _role_template() -> dict[str, Any]:
    template, problems = decode(str(REPO_ROOT / "deploy" / "github-oidc-role.yaml"))
    assert not problems and template is not None
    return dict(template)


def test_the_role_template_and_cdk_json_follow_one_environment_name_rule() -> None:
    parameter = _role_template()["Parameters"]["Environment"]
    assert parameter["AllowedPattern"] == ENVIRONMENT_NAME.pattern


def test_the_longest_name_the_rule_allows_fits_every_name_built_from_it() -> None:
    """IAM role names hold 64 characters, CloudFormation stack names 128: the template's roles
    (kinesis-fleet-<env>-github-deploy, ...), the app's stacks (kinesis-fleet-<env>-monitoring, ...) and the
    README's stack of the roles (kinesis-fleet-github-<env>) must all fit with the longest allowed name."""
    longest = "q" * int(re.search(r"\{0,(\d+)\}", ENVIRONMENT_NAME.pattern)[1]) + "q"  # type: ignore[index]
    assert ENVIRONMENT_NAME.match(longest) and not ENVIRONMENT_NAME.match(longest + "q")
    resources = _role_template()["Resources"]
    roles = [
        r["Properties"]["RoleName"]["Fn::Sub"] for r in resources.values() if r["Type"] == "AWS::IAM::Role"
    ]
    assert len(roles) == 2
    for role in roles:
        assert len(role.replace("${Environment}", longest)) <= 64, role
    assert any(len(role.replace("${Environment}", longest)) == 64 for role in roles)  # not needlessly short
    for unit in ("streaming", "state", "analytics", "consumer", "monitoring"):
        assert len(f"kinesis-fleet-{longest}-{unit}") <= 128
    assert len(f"kinesis-fleet-github-{longest}") <= 128
    raw = copy.deepcopy(_raw())
    raw[longest] = raw.pop("dev")
    assert longest in load_environments(raw)


@pytest.mark.parametrize("name", ["QA", "Qa-1", "q" * 37, "1qa", "qa_1"])
def test_a_name_the_role_template_would_refuse_is_refused(name: str) -> None:
    raw = copy.deepcopy(_raw())
    raw[name] = raw.pop("dev")
    with pytest.raises(ConfigError) as caught:
        load_environments(raw)
    assert caught.value.setting == f"environments.{name}"
    assert "36 characters at most" in str(caught.value) and "github-deploy" in str(caught.value)
