"""Buckets, EMR Serverless, the job role's reach, the job code bundle and the compaction schedule."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from stacks.spark_code import bundle_spark_jobs

from .cfn import as_list, logical_id, render, statements_of
from .conftest import ENVIRONMENTS, Synth, arn_parts

pytestmark = pytest.mark.infra

S3_WRITES = {"s3:PutObject", "s3:DeleteObject*", "s3:Abort*"}


def _buckets(synth: Synth, env: str) -> dict[str, dict[str, Any]]:
    return {
        k.removeprefix("DataLake")[:-8]: r
        for k, r in synth.resources(env, "analytics", "AWS::S3::Bucket").items()
    }


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_buckets_are_encrypted_private_logged_and_expire(synth: Synth, env: str) -> None:
    buckets = _buckets(synth, env)
    assert set(buckets) == {"AccessLogs", "Raw", "Curated", "Artifacts"}
    for name, bucket in buckets.items():
        props = bucket["Properties"]
        (rule,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        algorithm = rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"]
        # Access-log delivery only works into an SSE-S3 bucket; every data bucket uses the KMS key.
        assert algorithm == ("AES256" if name == "AccessLogs" else "aws:kms"), name
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert props["LifecycleConfiguration"]["Rules"], name
        if name != "AccessLogs":
            assert render(props["LoggingConfiguration"]["DestinationBucketName"]).startswith(
                "DataLakeAccessLogs"
            )
    raw_rules = buckets["Raw"]["Properties"]["LifecycleConfiguration"]["Rules"]
    assert {"Id": "expire-raw", "ExpirationInDays": synth.settings[env]["analytics"]["raw_expiration_days"],
            "Status": "Enabled"} in raw_rules  # fmt: skip
    policies = synth.resources(env, "analytics", "AWS::S3::BucketPolicy")
    ssl_only = {
        render(p["Properties"]["Bucket"])
        for p in policies.values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
    }
    assert len(ssl_only) == 4


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_emr_serverless_application(synth: Synth, env: str) -> None:
    analytics = synth.settings[env]["analytics"]
    app = synth.one(env, "analytics", "AWS::EMRServerless::Application")["Properties"]
    assert app["Type"] == "SPARK" and app["ReleaseLabel"] == analytics["emr_release_label"]
    assert app["MaximumCapacity"] == {
        "Cpu": f"{analytics['max_vcpu']} vCPU",
        "Memory": f"{analytics['max_memory_gb']} GB",
    }
    assert app["AutoStopConfiguration"]["Enabled"] is True


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_job_role_reads_raw_and_writes_curated_only(synth: Synth, env: str) -> None:
    template = synth.template(env, "analytics")
    role = logical_id(template, "AWS::IAM::Role", "SparkJobRole")
    trust = template["Resources"][role]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "emr-serverless.amazonaws.com"}]
    s3_access: dict[str, set[str]] = {}
    for statement in statements_of(template, role):
        resources = {render(r) for r in as_list(statement["Resource"])}
        assert "*" not in resources
        for action in as_list(statement["Action"]):
            if action.startswith("s3:"):
                for resource in resources:
                    s3_access.setdefault(resource, set()).add(action)
    writable = {r for r, actions in s3_access.items() if actions & S3_WRITES}
    assert writable and all(r.startswith("DataLakeCurated") for r in writable)
    readable = {r.split(".")[0][len("DataLake") : -8] for r in s3_access}
    assert readable == {"Raw", "Curated", "Artifacts"}
    assert any(r.startswith("DataLakeRaw") and r.endswith("/raw/*") for r in s3_access)
    assert any(r.startswith("DataLakeArtifacts") and r.endswith("/spark/*") for r in s3_access)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_job_role_can_set_up_cloudwatch_logging(synth: Synth, env: str) -> None:
    """EMR Serverless's CloudWatch logging describes the group and its streams before it writes."""
    template = synth.template(env, "analytics")
    role = logical_id(template, "AWS::IAM::Role", "SparkJobRole")
    logs: dict[str, set[str]] = {}
    for statement in statements_of(template, role):
        for action in as_list(statement["Action"]):
            if action.startswith("logs:"):
                logs.setdefault(action, set()).update(render(r) for r in as_list(statement["Resource"]))
    group = {r for r in logs["logs:PutLogEvents"]}
    assert len(group) == 1 and next(iter(group)).startswith("SparkJobLogs")
    assert logs["logs:CreateLogStream"] == logs["logs:DescribeLogStreams"] == group
    partition, region, account = arn_parts(synth.settings, env)
    assert logs["logs:DescribeLogGroups"] == {f"arn:{partition}:logs:{region}:{account}:log-group:*"}


def _definition(synth: Synth, env: str) -> dict[str, Any]:
    machine = synth.one(env, "analytics", "AWS::StepFunctions::StateMachine")["Properties"]
    definition: dict[str, Any] = json.loads(render(machine["DefinitionString"]))
    return definition


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_compaction_runs_the_job_with_retries(synth: Synth, env: str) -> None:
    definition = _definition(synth, env)
    assert definition["QueryLanguage"] == "JSONata"
    run = definition["States"]["RunCompaction"]
    assert run["Resource"].endswith(":states:::emr-serverless:startJobRun.sync")
    (retry,) = run["Retry"]
    assert retry["MaxAttempts"] == synth.settings[env]["analytics"]["compaction_retries"] > 0
    submit = run["Arguments"]["JobDriver"]["SparkSubmit"]
    assert submit["EntryPoint"].endswith("/spark/compact.py")
    assert submit["SparkSubmitParameters"].startswith("--py-files s3://")
    assert submit["SparkSubmitParameters"].endswith("/spark/spark_jobs.zip")
    args, window_args = _arguments(submit["EntryPointArguments"])
    assert set(args) == {"--input", "--output", "--quarantine"}
    assert window_args == WINDOW_ARGUMENTS
    assert args["--input"].startswith("s3://DataLakeRaw") and args["--input"].endswith("/raw/")
    assert args["--output"].startswith("s3://DataLakeCurated")
    assert run["Next"] == "RunAggregation" and run["Output"] == "{% $states.input %}"
    aggregate = definition["States"]["RunAggregation"]["Arguments"]["JobDriver"]["SparkSubmit"]
    assert aggregate["EntryPoint"].endswith("/spark/aggregate.py")
    agg_args, agg_window_args = _arguments(aggregate["EntryPointArguments"])
    assert agg_args["--input"] == args["--output"]  # aggregates what compaction just wrote
    assert agg_args["--output"].endswith("/metrics/") and agg_window_args == WINDOW_ARGUMENTS


# What follows a job's own arguments: the window, and the flag when the window asks for it.
WINDOW_ARGUMENTS = "'--start', $states.input.start, '--end', $states.input.end], $states.input.only_stale ? ['--only-stale'] : [])"


def _arguments(expression: str) -> tuple[dict[str, str], str]:
    """A job's ``EntryPointArguments`` (one JSONata expression): its fixed arguments, and the rest."""
    assert expression.startswith("{% $append([") and expression.endswith(" %}"), expression
    body = expression.removeprefix("{% $append([").removesuffix(" %}")
    fixed, rest = body.split(", '--start', ", 1)
    values = [v.strip().strip("'") for v in fixed.split(", ")]
    return dict(zip(values[::2], values[1::2], strict=True)), "'--start', " + rest


def _evaluate(expression: str, input_: dict[str, Any], start_time: str) -> Any:
    """A ``{% ... %}`` JSONata template of the definition, evaluated as Step Functions does."""
    import jsonata  # jsonata-python (requirements/dev.txt)

    assert expression.startswith("{%") and expression.endswith("%}"), expression
    compiled = jsonata.Jsonata(expression[2:-2].strip())
    compiled.assign("states", {"input": input_, "context": {"Execution": {"StartTime": start_time}}})
    return compiled.evaluate(None)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_scheduled_runs_look_back_and_rewrite_only_stale_hours(synth: Synth, env: str) -> None:
    """A scheduled run covers the last N full hours, N hours back to 1 hour back, with ``--only-stale`` on both
    jobs; a manual run of a range rewrites the range (no flag)."""
    lookback = synth.settings[env]["analytics"]["compaction_lookback_hours"]
    assert lookback == 3
    definition = _definition(synth, env)
    window = definition["States"]["Window"]["Output"]
    assert f"- {lookback * 3_600_000}, " in window["start"] and "- 3600000, " in window["end"]
    assert window["only_stale"] == "{% $not($exists($states.input.start) or $exists($states.input.end)) %}"
    for job in ("RunCompaction", "RunAggregation"):
        arguments = definition["States"][job]["Arguments"]["JobDriver"]["SparkSubmit"]["EntryPointArguments"]
        assert arguments.endswith(WINDOW_ARGUMENTS + " %}"), arguments

    # Evaluated: the schedule's input, then a manual range.
    cases = [
        (
            {"scheduled_time": "2026-11-21T05:15:00.000Z"},
            ["2026-11-21T02", "2026-11-21T04", ["--only-stale"]],
        ),
        ({"start": "2026-11-20T00", "end": "2026-11-20T23"}, ["2026-11-20T00", "2026-11-20T23", []]),
    ]
    for input_, (start, end, flag) in cases:
        state = {k: _evaluate(v, input_, "2026-11-21T05:16:02.000Z") for k, v in window.items()}
        assert (state["start"], state["end"]) == (start, end), (input_, state)
        for job in ("RunCompaction", "RunAggregation"):
            submit = definition["States"][job]["Arguments"]["JobDriver"]["SparkSubmit"]
            argv = _evaluate(submit["EntryPointArguments"], state, "2026-11-21T05:16:02.000Z")
            assert argv[-4 - len(flag) :] == ["--start", start, "--end", end, *flag], (job, input_, argv)
            assert argv.count("--only-stale") == len(flag)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_schedule_starts_the_state_machine(synth: Synth, env: str) -> None:
    analytics = synth.settings[env]["analytics"]
    schedule = synth.one(env, "analytics", "AWS::Scheduler::Schedule")["Properties"]
    assert schedule["ScheduleExpression"] == analytics["compaction_schedule"]
    assert schedule["State"] == ("ENABLED" if analytics["compaction_enabled"] else "DISABLED")
    assert render(schedule["Target"]["Arn"]).startswith("CompactionStateMachine")
    assert schedule["Target"]["RetryPolicy"]["MaximumRetryAttempts"] == 3
    assert "<aws.scheduler.scheduled-time>" in schedule["Target"]["Input"]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_job_code_is_deployed_under_spark_prefix(synth: Synth, env: str) -> None:
    (deployment,) = synth.resources(env, "analytics", "Custom::CDKBucketDeployment").values()
    assert deployment["Properties"]["DestinationBucketKeyPrefix"] == "spark/"
    assert render(deployment["Properties"]["DestinationBucketName"]).startswith("DataLakeArtifacts")


def _package(root: Path) -> Path:
    package = root / "spark_jobs"
    (package / "tests").mkdir(parents=True)
    (package / "__pycache__").mkdir()
    for name in ("__init__.py", "compact.py", "aggregate.py", "transforms.py", "tests/test_x.py"):
        (package / name).write_text(f"# {name}\n")
    (package / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    return package


def test_bundle_holds_entry_files_and_a_reproducible_package_zip(tmp_path: Path) -> None:
    package = _package(tmp_path / "src")
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    bundle_spark_jobs(package, first)
    bundle_spark_jobs(package, second)
    assert sorted(p.name for p in first.iterdir()) == ["aggregate.py", "compact.py", "spark_jobs.zip"]
    with zipfile.ZipFile(first / "spark_jobs.zip") as archive:
        assert archive.namelist() == [
            "spark_jobs/__init__.py",
            "spark_jobs/aggregate.py",
            "spark_jobs/compact.py",
            "spark_jobs/transforms.py",
        ]
    assert (first / "spark_jobs.zip").read_bytes() == (second / "spark_jobs.zip").read_bytes()


def test_bundle_refuses_a_package_without_entry_files(tmp_path: Path) -> None:
    package = _package(tmp_path)
    (package / "compact.py").unlink()
    with pytest.raises(FileNotFoundError, match=r"compact\.py"):
        bundle_spark_jobs(package, tmp_path)
