"""The hourly compaction: EventBridge Scheduler starts a Step Functions run that runs the job with retries."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_stepfunctions as sfn
from cdk_nag import NagSuppressions
from constructs import Construct

from stacks.config import AnalyticsSettings
from stacks.emr import SparkApplication
from stacks.nag import LOG_GROUP_NOT_KMS, skip_checkov
from stacks.retention import log_retention
from stacks.spark_code import SparkJobsCode

__all__ = ["ONLY_STALE", "CompactionSchedule", "hour_expression", "job_arguments"]

_HOUR = "'[Y0001]-[M01]-[D01]T[H01]'"
# When the run was due: the scheduler's time, else (a manual run) the execution's start.
_DUE = (
    "($exists($states.input.scheduled_time) ? $states.input.scheduled_time"
    " : $states.context.Execution.StartTime)"
)


#: Whether the run is the schedule's (no range in the input): then the jobs rewrite only stale hours.
ONLY_STALE = "{% $not($exists($states.input.start) or $exists($states.input.end)) %}"


def job_arguments(arguments: list[str]) -> str:
    """JSONata for a job's arguments: ``arguments``, the window, and ``--only-stale`` if the window says so."""
    fixed = ", ".join(f"'{argument}'" for argument in arguments)
    window = "'--start', $states.input.start, '--end', $states.input.end"
    return f"{{% $append([{fixed}, {window}], $states.input.only_stale ? ['--only-stale'] : []) %}}"


def hour_expression(key: str, hours_before_due: int) -> str:
    """JSONata for ``--start``/``--end``: the input's ``key`` if given (a backfill), else an hour before due."""
    shifted = f"$toMillis({_DUE}) - {hours_before_due * 3_600_000}"
    return f"{{% $exists($states.input.{key}) ? $states.input.{key} : $fromMillis({shifted}, {_HOUR}) %}}"


class CompactionSchedule(Construct):
    """Compacts the last ``compaction_lookback_hours`` full UTC hours of raw data into curated Parquet, then
    aggregates them into the per-minute and per-hour metrics tables, every hour, retrying failed runs. A
    scheduled run passes ``--only-stale`` to both jobs: of those hours it rewrites only the ones whose output
    is older than their input (late raw objects: a worker catching up on a backlog, a flush after a failover),
    or absent (the hour just ended).

    The jobs read the inclusive hour range ``start..end`` (``YYYY-MM-DDTHH``); a manual execution with
    ``{"start": "...", "end": "..."}`` as input re-runs any range, rewriting every hour of it (no
    ``--only-stale``: for fixes and backfills; the jobs' output is idempotent per hour).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        spark: SparkApplication,
        code: SparkJobsCode,
        raw_uri: str,
        curated_uri: str,
        quarantine_uri: str,
        metrics_uri: str,
        settings: AnalyticsSettings,
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, id)
        window = sfn.Pass.jsonata(
            self,
            "Window",
            # spark_jobs/compact.py takes an inclusive range: the last N full hours are N back .. 1 back.
            outputs={
                "start": hour_expression("start", settings.compaction_lookback_hours),
                "end": hour_expression("end", 1),
                "only_stale": ONLY_STALE,
            },
        )
        compact = self._job_state(
            "RunCompaction",
            spark,
            code,
            "compact",
            ["--input", raw_uri, "--output", curated_uri, "--quarantine", quarantine_uri],
            settings,
        )
        aggregate = self._job_state(
            "RunAggregation",
            spark,
            code,
            "aggregate",
            ["--input", curated_uri, "--output", metrics_uri],
            settings,
        )
        self.log_group = logs.LogGroup(
            self, "Logs", retention=log_retention(log_retention_days), removal_policy=RemovalPolicy.DESTROY
        )
        skip_checkov(self.log_group, LOG_GROUP_NOT_KMS)
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(window.next(compact).next(aggregate)),
            query_language=sfn.QueryLanguage.JSONATA,
            timeout=Duration.minutes(
                settings.job_timeout_minutes * (settings.compaction_retries + 1) * 2 + 60
            ),
            tracing_enabled=True,
            logs=sfn.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True
            ),
        )
        self._grant_run(spark)
        self.schedule = scheduler.Schedule(
            self,
            "Schedule",
            schedule=scheduler.ScheduleExpression.expression(settings.compaction_schedule),
            enabled=settings.compaction_enabled,
            description=f"Compact the last {settings.compaction_lookback_hours} hours of raw data (stale ones)",
            target=targets.StepFunctionsStartExecution(
                self.state_machine,
                input=scheduler.ScheduleTargetInput.from_object(
                    {"scheduled_time": scheduler.ContextAttribute.scheduled_time}
                ),
                retry_attempts=3,
                max_event_age=Duration.hours(1),
            ),
        )

    def _job_state(
        self,
        id: str,
        spark: SparkApplication,
        code: SparkJobsCode,
        job: str,
        arguments: list[str],
        settings: AnalyticsSettings,
    ) -> sfn.CustomState:
        """A ``startJobRun.sync`` task for one job over the window, retried; it passes the window on."""
        return sfn.CustomState(
            self,
            id,
            state_json={
                "Type": "Task",
                "QueryLanguage": "JSONata",
                "Resource": f"arn:{Stack.of(self).partition}:states:::emr-serverless:startJobRun.sync",
                "Arguments": {
                    "ApplicationId": spark.application_id,
                    "ExecutionRoleArn": spark.job_role.role_arn,
                    "Name": f"{{% '{job}-' & $states.input.start %}}",
                    "ClientToken": "{% $uuid() %}",
                    "ExecutionTimeoutMinutes": settings.job_timeout_minutes,
                    "JobDriver": {
                        "SparkSubmit": {
                            "EntryPoint": code.entry_point_uris[job],
                            "EntryPointArguments": job_arguments(arguments),
                            "SparkSubmitParameters": f"--py-files {code.package_uri}",
                        }
                    },
                    "ConfigurationOverrides": {
                        "MonitoringConfiguration": {
                            "CloudWatchLoggingConfiguration": {
                                "Enabled": True,
                                "LogGroupName": spark.log_group.log_group_name,
                            }
                        }
                    },
                },
                # The next job runs over the same window: pass it on instead of the job run's result.
                "Output": "{% $states.input %}",
                "Retry": [
                    {
                        "ErrorEquals": ["States.ALL"],
                        "IntervalSeconds": 120,
                        "MaxAttempts": settings.compaction_retries,
                        "BackoffRate": 2.0,
                    }
                ],
            },
        )

    def _grant_run(self, spark: SparkApplication) -> None:
        """What ``startJobRun.sync`` needs: start, watch and cancel runs, pass the job role, its event rule."""
        stack = Stack.of(self)
        role = self.state_machine.role
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["emr-serverless:StartJobRun"], resources=[spark.application_arn])
        )
        job_runs = f"{spark.application_arn}/jobruns/*"
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["emr-serverless:GetJobRun", "emr-serverless:CancelJobRun"], resources=[job_runs]
            )
        )
        spark.job_role.grant_pass_role(role)
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["events:PutTargets", "events:PutRule", "events:DescribeRule"],
                resources=[
                    stack.format_arn(
                        service="events",
                        resource="rule",
                        resource_name="StepFunctionsGetEventsForEMRServerlessJobRule",
                    )
                ],
            )
        )
        NagSuppressions.add_resource_suppressions(
            role,
            [
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "Job run ids are only known at run time; the wildcard is limited to this "
                    "application's runs. X-Ray and log delivery actions do not support resource scoping.",
                    "applies_to": [
                        {"regex": "/^Resource::<.*Application.*Arn>\\/jobruns\\/\\*$/"},
                        "Resource::*",
                    ],
                }
            ],
            apply_to_children=True,
        )
