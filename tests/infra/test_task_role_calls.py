"""The task role allows every AWS call the deployed consumer makes, on the resource it makes it on, and no
DynamoDB action the consumer never calls.

Read from the synthesized templates of every environment (prod with ``consumer.retrieval: fanout`` is in
test_fanout.py). The task definition's environment is resolved to concrete names and ARNs the way CloudFormation
would (a resource's physical name is its logical id; weak cross-stack references are followed to the producing
stack's resource); from it comes the list of calls the consumer makes, each with the IAM action AWS checks and
the resource ARN it checks it on (from the consumer's own code: preflight, discovery, polling or fan-out reads,
the lease and checkpoint repositories and their transactions, the raw S3 sink, the dead-letter queue, the
processor's own table); then the role's policy statements are evaluated against each call as IAM does for an
identity policy (Allow statements, ``*``/``?`` wildcards in actions and resources).

The IAM action behind an API call is not always its name: S3 ``HeadBucket`` (the raw sink's bucket check at
start) is authorized as ``s3:ListBucket`` on the bucket ARN; a ``TransactWriteItems`` as the ``PutItem``,
``UpdateItem``, ``DeleteItem`` and ``ConditionCheckItem`` of its items; ``SubscribeToShard`` and
``DescribeStreamConsumer`` on the stream consumer's ARN; SSE-KMS writes need ``kms:GenerateDataKey`` on the
resource's key and encrypted reads ``kms:Decrypt``.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

import pytest

from .cfn import as_list, logical_id, statements_of
from .conftest import ENVIRONMENTS, Synth

pytestmark = pytest.mark.infra

_ACCOUNT, _REGION = "123456789012", "eu-west-1"
# DynamoDB actions the consumer's own code calls on the lease and checkpoint tables (consumer/leases,
# consumer/checkpoint, consumer/preflight.py, consumer/admin): transactions are authorized per item action.
LEASE_TABLE_ACTIONS = frozenset(
    {
        "dynamodb:DescribeTable",  # preflight: the key schema
        "dynamodb:Scan",  # preflight's table roles, the leader's scan, status
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:ConditionCheckItem",  # TransactWriteItems' ConditionCheck items
    }
)


@dataclass(frozen=True)
class Call:
    """One authorization AWS makes for a call of the consumer: ``action`` on ``resource``."""

    why: str
    action: str
    resource: str


# ----------------------------------------------------------------------- CloudFormation, resolved to strings


@dataclass(frozen=True)
class Stage:
    """One environment's templates by unit, with the account and region its pseudo parameters stand for."""

    templates: dict[str, dict[str, Any]]
    prefix: str  # kinesis-fleet-<env>-

    def resolve(self, unit: str, value: Any) -> str:
        """``value`` from stack ``unit`` as a concrete string (physical names are logical ids)."""
        if isinstance(value, str):
            return value
        ((fn, arg),) = value.items()
        if fn == "Ref":
            pseudo = {
                "AWS::Partition": "aws",
                "AWS::Region": _REGION,
                "AWS::AccountId": _ACCOUNT,
                "AWS::URLSuffix": "amazonaws.com",
            }
            return pseudo[arg] if arg in pseudo else self._attribute(unit, arg, "Ref")
        if fn == "Fn::GetAtt":
            return self._attribute(unit, arg[0], arg[1])
        if fn == "Fn::Join":
            return str(arg[0]).join(self.resolve(unit, v) for v in arg[1])
        if fn == "Fn::GetStackOutput":
            producer = arg["StackName"].removeprefix(self.prefix)
            return self.resolve(producer, self.templates[producer]["Outputs"][arg["OutputName"]]["Value"])
        raise AssertionError(f"cannot resolve {value!r}")

    def _attribute(self, unit: str, logical: str, attribute: str) -> str:
        resource = self.templates[unit]["Resources"][logical]
        kind, properties = resource["Type"], resource.get("Properties", {})
        region, account = _REGION, _ACCOUNT
        if kind == "AWS::Kinesis::Stream":
            name = properties["Name"]
            return name if attribute == "Ref" else f"arn:aws:kinesis:{region}:{account}:stream/{name}"
        if kind == "AWS::DynamoDB::Table":
            return logical if attribute == "Ref" else f"arn:aws:dynamodb:{region}:{account}:table/{logical}"
        if kind == "AWS::SQS::Queue":
            if attribute == "Ref":
                return f"https://sqs.{region}.amazonaws.com/{account}/{logical}"
            return f"arn:aws:sqs:{region}:{account}:{logical}" if attribute == "Arn" else logical
        if kind == "AWS::S3::Bucket":
            return logical.lower() if attribute == "Ref" else f"arn:aws:s3:::{logical.lower()}"
        if kind == "AWS::KMS::Key":
            return logical if attribute == "Ref" else f"arn:aws:kms:{region}:{account}:key/{logical}"
        raise AssertionError(f"{unit}/{logical}: no physical name for {kind}.{attribute}")

    def find(self, kind: str, attribute: str, value: str) -> tuple[str, dict[str, Any]]:
        """The (unit, resource) of ``kind`` whose ``attribute`` resolves to ``value``."""
        found = [
            (unit, resource)
            for unit, template in self.templates.items()
            for lid, resource in template["Resources"].items()
            if resource["Type"] == kind and self._attribute(unit, lid, attribute) == value
        ]
        assert len(found) == 1, f"expected one {kind} with {attribute} {value}, found {len(found)}"
        return found[0]

    def key_of(self, unit: str, resource: dict[str, Any]) -> str:
        """The ARN of the customer managed key that encrypts ``resource``."""
        p = resource["Properties"]
        key = (
            p.get("StreamEncryption", {}).get("KeyId")
            or p.get("SSESpecification", {}).get("KMSMasterKeyId")
            or p.get("KmsMasterKeyId")
            or p["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"][
                "KMSMasterKeyID"
            ]
        )
        return self.resolve(unit, key)


def _stage(templates: dict[str, dict[str, Any]], env: str) -> Stage:
    return Stage(templates, f"kinesis-fleet-{env}-")


# --------------------------------------------------------------------------------- the consumer's calls


def _task_environment(stage: Stage) -> dict[str, str]:
    task = [
        r
        for r in stage.templates["consumer"]["Resources"].values()
        if r["Type"] == "AWS::ECS::TaskDefinition"
    ]
    (container,) = task[0]["Properties"]["ContainerDefinitions"]
    return {e["Name"]: stage.resolve("consumer", e["Value"]) for e in container["Environment"]}


def consumer_calls(stage: Stage, processor_table: dict[str, Any] | None) -> list[Call]:
    """What a worker (and an operator's ``status``/``drain``/``replay`` in its task) calls, from its env."""
    env = _task_environment(stage)
    calls: list[Call] = []
    for name in env["CONSUMER_STREAMS"].split(","):
        arn = f"arn:aws:kinesis:{_REGION}:{_ACCOUNT}:stream/{name}"
        unit, stream = stage.find("AWS::Kinesis::Stream", "Arn", arn)
        calls += [
            Call("preflight check_stream", "kinesis:DescribeStreamSummary", arn),
            Call("shard discovery, replay", "kinesis:ListShards", arn),
            Call("reads from an encrypted stream", "kms:Decrypt", stage.key_of(unit, stream)),
        ]
        if env["CONSUMER_RETRIEVAL"] == "polling":
            calls += [
                Call("polling reader, replay", "kinesis:GetShardIterator", arn),
                Call("polling reader, replay", "kinesis:GetRecords", arn),
            ]
        else:
            consumer_arn = f"{arn}/consumer/{env['CONSUMER_FANOUT_NAME']}:1700000000"
            calls += [
                Call("fan-out register_consumer", "kinesis:ListStreamConsumers", arn),
                Call("fan-out register_consumer", "kinesis:RegisterStreamConsumer", arn),
                Call("fan-out register_consumer", "kinesis:DescribeStreamConsumer", consumer_arn),
                Call("fan-out reader", "kinesis:SubscribeToShard", consumer_arn),
            ]
    for variable in ("CONSUMER_LEASE_TABLE", "CONSUMER_CHECKPOINT_TABLE"):
        arn = f"arn:aws:dynamodb:{_REGION}:{_ACCOUNT}:table/{env[variable]}"
        stage.find("AWS::DynamoDB::Table", "Arn", arn)
        calls += [Call(f"{variable} repository", action, arn) for action in sorted(LEASE_TABLE_ACTIONS)]
    unit, queue = stage.find("AWS::SQS::Queue", "Ref", env["CONSUMER_DLQ_URL"])
    queue_arn = stage.resolve(unit, {"Fn::GetAtt": [_lid(stage, unit, queue), "Arn"]})
    calls += [
        Call("preflight: the dead-letter queue exists", "sqs:GetQueueAttributes", queue_arn),
        Call("dead-lettering a record", "sqs:SendMessage", queue_arn),
        Call("SendMessage to an SSE-KMS queue", "kms:GenerateDataKey", stage.key_of(unit, queue)),
        Call("SendMessage to an SSE-KMS queue", "kms:Decrypt", stage.key_of(unit, queue)),
    ]
    bucket = env["CONSUMER_RAW_BUCKET"]
    unit, raw = stage.find("AWS::S3::Bucket", "Ref", bucket)
    obj = f"arn:aws:s3:::{bucket}/{env['CONSUMER_RAW_PREFIX']}/stream=s/date=2026-11-20/hour=05/x.json.gz"
    calls += [
        Call("preflight: HeadBucket on CONSUMER_RAW_BUCKET", "s3:ListBucket", f"arn:aws:s3:::{bucket}"),
        Call("raw sink PutObject", "s3:PutObject", obj),
        Call("PutObject to an SSE-KMS bucket", "kms:GenerateDataKey", stage.key_of(unit, raw)),
    ]
    if processor_table is not None:
        arn = f"arn:aws:dynamodb:{_REGION}:{_ACCOUNT}:table/{env[processor_table['variable']]}"
        calls += [Call("the processor's table", f"dynamodb:{a}", arn) for a in processor_table["actions"]]
    return calls


def _lid(stage: Stage, unit: str, resource: dict[str, Any]) -> str:
    return next(k for k, r in stage.templates[unit]["Resources"].items() if r is resource)


# ------------------------------------------------------------------------------------------ evaluation


def allowed(statements: list[dict[str, Any]], stage: Stage, call: Call) -> bool:
    """Whether an Allow statement (without conditions) covers ``call``; there are no Deny statements."""
    for statement in statements:
        assert statement["Effect"] == "Allow" and "NotAction" not in statement
        if "Condition" in statement:
            continue  # a condition this test cannot evaluate: count the statement as not granting
        actions = [a.lower() for a in as_list(statement["Action"])]
        resources = [stage.resolve("consumer", r) for r in as_list(statement["Resource"])]
        if any(fnmatch.fnmatchcase(call.action.lower(), a) for a in actions) and any(
            fnmatch.fnmatchcase(call.resource, r) for r in resources
        ):
            return True
    return False


def _task_role_statements(stage: Stage) -> list[dict[str, Any]]:
    template = stage.templates["consumer"]
    return statements_of(template, logical_id(template, "AWS::IAM::Role", "TaskRole"))


def _denied(stage: Stage, processor_table: dict[str, Any] | None) -> list[str]:
    statements = _task_role_statements(stage)
    return [
        f"{c.action} on {c.resource} ({c.why})"
        for c in consumer_calls(stage, processor_table)
        if not allowed(statements, stage, c)
    ]


def _stage_of(synth: Synth, env: str) -> Stage:
    return _stage({u: synth.template(env, u) for (e, u) in synth.templates if e == env}, env)


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_task_role_allows_every_call_the_consumer_makes(synth: Synth, env: str) -> None:
    processor_table = synth.settings[env]["consumer"].get("processor_table")
    assert _denied(_stage_of(synth, env), processor_table) == []


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_the_task_role_allows_no_table_action_the_consumer_never_calls(synth: Synth, env: str) -> None:
    stage = _stage_of(synth, env)
    environment = _task_environment(stage)
    tables = {
        f"arn:aws:dynamodb:{_REGION}:{_ACCOUNT}:table/{environment[v]}"
        for v in ("CONSUMER_LEASE_TABLE", "CONSUMER_CHECKPOINT_TABLE")
    }
    granted = {
        a
        for s in _task_role_statements(stage)
        for a in as_list(s["Action"])
        if a.startswith("dynamodb:")
        and {stage.resolve("consumer", r) for r in as_list(s["Resource"])} & tables
    }
    assert granted == LEASE_TABLE_ACTIONS
