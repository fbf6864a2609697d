"""A team's own processor project, done right, from ``cdk.json`` to a consuming worker on the emulators.

The project (outside the repository, as a team's may be): src layout, setuptools, a C-extension dependency
(msgpack) pinned with its hash in a ``requirements.txt``, and a DynamoDB table of its own
(``consumer.processor_table``). dev is synthesized with it; the task role must grant exactly the table's actions
on exactly that table and the task must get its name; the staged image context is installed as
consumer/Dockerfile's build stage installs it (with the build arguments the asset manifest passes to Docker);
the task definition's command and environment then run a worker that consumes a stream with the team's
processor, which writes to its table with a setting of its own from cdk.json; its secrets stay ARNs in the
template, read by ECS with an execution role allowed exactly those. Synthesizing an unchanged project again gives the same image (no roll of
the fleet); a change gives another (ECS rolls).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO_ROOT, Synth, _spark_jobs_dir, install_image
from .test_task_definition_runs import (
    RECORDS_PER_STREAM,
    Worker,
    _consumes_everything,
    _landed_everything,
    _start,
)

pytestmark = [pytest.mark.infra, pytest.mark.integration]

# msgpack 1.1.0, CPython 3.11, manylinux2014 x86_64: what pip-compile --generate-hashes writes for the image.
MSGPACK = (
    "msgpack==1.1.0 \\\n    --hash=sha256:5e1da8f11a3dd397f0a32c76165cf0c4eb95b31013a94f6ecc0b280c05c91b59\n"
)
PROCESSOR = '''"""The team's processor: each record's size, packed with msgpack, in its own table; then the raw sink."""
from __future__ import annotations

import os
from typing import Any

import msgpack

from consumer.aws import shared_client
from consumer.sinks.raw_s3 import RawS3Sink


class Orders(RawS3Sink):
    def __init__(self, **raw_sink: Any) -> None:
        super().__init__(**raw_sink)
        self.table = os.environ["ACME_ORDERS"]
        self.api = os.environ["ACME_API_URL"]  # a plain setting of its own, from cdk.json
        self.dynamodb = shared_client("dynamodb")

    def process_records(self, data: Any) -> None:
        for record in data.records:
            packed = msgpack.packb({"size": len(record.data)})
            item = {"id": {"S": record.partition_key}, "packed": {"B": packed}, "api": {"S": self.api}}
            self.dynamodb.put_item(TableName=self.table, Item=item)
        super().process_records(data)
'''
TABLE = {"variable": "ACME_ORDERS", "partition_key": "id", "actions": ["PutItem"]}
API_URL = "https://orders.example.com/v1"
SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:acme/orders-AbC123"
PARAMETER = "arn:aws:ssm:eu-west-1:123456789012:parameter/acme/db-password"
SECRETS = {"ACME_API_KEY": f"{SECRET}:key::", "ACME_DB_PASSWORD": PARAMETER}


def _project(root: Path) -> Path:
    files = {
        "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "acme-orders"\nversion = "1.0"\n'
        'dependencies = ["kinesis-fleet-consumer", "msgpack"]\n',
        "requirements.txt": MSGPACK,
        "src/acme_orders/__init__.py": "",
        "src/acme_orders/proc.py": PROCESSOR,
        "tests/test_proc.py": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _synth(project: Path, outdir: Path) -> Synth:
    """dev, synthesized as ``app.py`` does, with the team's settings in ``consumer``."""
    from aws_cdk import App

    import app as entry

    context = entry.cdk_json_context(REPO_ROOT)
    dev = json.loads(json.dumps(context["environments"]["dev"]))
    dev["consumer"].update(
        processor="acme_orders.proc:Orders",
        processor_project=os.path.relpath(project, REPO_ROOT),
        processor_table=TABLE,
        processor_environment={"ACME_API_URL": API_URL},
        processor_secrets=SECRETS,
    )
    context = {
        **context,
        "environments": {"dev": dev},
        "env": "dev",
        "@aws-cdk/core:failSynthOnValidationErrors": False,
    }
    cdk_app = App(context=context, outdir=str(outdir))
    entry.build(cdk_app, REPO_ROOT, spark_jobs=_spark_jobs_dir(outdir.parent))
    cdk_app.synth()
    synth = Synth(outdir=outdir, settings=context["environments"])
    manifest = json.loads((outdir / "assembly-dev" / "manifest.json").read_text())
    for artifact in manifest["artifacts"].values():
        if artifact["type"] == "aws:cloudformation:stack":
            unit = artifact["properties"]["stackName"].removeprefix("kinesis-fleet-dev-")
            path = outdir / "assembly-dev" / artifact["properties"]["templateFile"]
            synth.templates[("dev", unit)] = json.loads(path.read_text())
    return synth


def _image(synth: Synth) -> tuple[Path, dict[str, str], Any]:
    """The staged build context, the build arguments Docker gets, and the task definition's image."""
    manifest = next(synth.outdir.glob("assembly-dev/*ConsumerService*.assets.json"))
    (image,) = json.loads(manifest.read_text())["dockerImages"].values()
    source = image["source"]
    task = synth.one("dev", "consumer", "AWS::ECS::TaskDefinition")
    (container,) = task["Properties"]["ContainerDefinitions"]
    return (
        (manifest.parent / source["directory"]).resolve(),
        source.get("dockerBuildArgs", {}),
        container["Image"],
    )


def _install(context: Path, build_args: dict[str, str], into: Path) -> Path:
    """consumer/Dockerfile's build stage without Docker: its ARGs reach the RUN as environment variables."""
    done = install_image(context, into / "venv", into / "builder", build_args)
    assert done.returncode == 0, f"the image's install failed:\n{done.stdout}\n{done.stderr}"
    return into / "venv" / "bin" / "python"


def _grants_exactly_the_table(synth: Synth) -> None:
    state = synth.template("dev", "state")
    (logical,) = [
        k
        for k, r in state["Resources"].items()
        if r["Type"] == "AWS::DynamoDB::Table" and r["Properties"]["KeySchema"][0]["AttributeName"] == "id"
    ]
    arn_output = {k for k, o in state["Outputs"].items() if o["Value"] == {"Fn::GetAtt": [logical, "Arn"]}}
    policies = synth.resources("dev", "consumer", "AWS::IAM::Policy")
    statements = [
        s
        for k, p in policies.items()
        if "TaskRole" in k
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if arn_output & set(json.dumps(s["Resource"]).replace('"', " ").split())
    ]
    assert statements == [
        {
            "Action": "dynamodb:PutItem",
            "Effect": "Allow",
            "Resource": {
                "Fn::GetStackOutput": {
                    "StackName": "kinesis-fleet-dev-state",
                    "Region": {"Ref": "AWS::Region"},
                    "OutputName": next(iter(arn_output)),
                }
            },
        }
    ], statements


def _secrets_stay_out_of_the_environment(synth: Synth) -> None:
    """The secrets reach the container as ECS secrets (the template holds their ARNs only), which the execution
    role may read, exactly those; the plain setting is in the environment."""
    task = synth.one("dev", "consumer", "AWS::ECS::TaskDefinition")
    (container,) = task["Properties"]["ContainerDefinitions"]
    assert container["Secrets"] == [{"Name": n, "ValueFrom": v} for n, v in sorted(SECRETS.items())]
    environment = {e["Name"]: e["Value"] for e in container["Environment"]}
    assert environment["ACME_API_URL"] == API_URL and not set(SECRETS) & set(environment)
    policies = synth.resources("dev", "consumer", "AWS::IAM::Policy")
    (execution,) = [p for k, p in policies.items() if "ExecutionRole" in k]
    reads = [
        s
        for s in execution["Properties"]["PolicyDocument"]["Statement"]
        if str(s["Action"]).startswith(("secretsmanager:", "ssm:"))
    ]
    assert reads == [
        {"Action": "secretsmanager:GetSecretValue", "Effect": "Allow", "Resource": SECRET},
        {"Action": "ssm:GetParameters", "Effect": "Allow", "Resource": PARAMETER},
    ], reads
    task_role = [p for k, p in policies.items() if "TaskRole" in k]
    assert "secretsmanager" not in json.dumps(task_role) and ":ssm:" not in json.dumps(task_role)


def test_a_teams_project_synthesizes_builds_and_consumes_with_its_own_table(
    tmp_path: Path,
    emulators: Any,
    unique_name: Callable[..., str],
    worker_processes: list[Worker],
) -> None:
    project = _project(tmp_path / "acme-orders")
    synth = _synth(project, tmp_path / "one" / "cdk.out")
    context, build_args, image = _image(synth)
    # An unchanged project: the same image, so a deploy does not roll the fleet (a change: see the end).
    assert _image(_synth(project, tmp_path / "two" / "cdk.out"))[2] == image
    _grants_exactly_the_table(synth)
    _secrets_stay_out_of_the_environment(synth)
    assert build_args == {"PROCESSOR": "acme_orders.proc:Orders"}
    assert (context / "processor" / "src" / "acme_orders" / "proc.py").is_file()
    assert not (context / "processor" / "tests").exists()

    python = _install(context, build_args, tmp_path / "image")
    run = _start("dev", synth, emulators, unique_name, tmp_path / "home", str(python))
    worker_processes.append(run.worker)
    assert run.task_env["ACME_ORDERS"], run.task_env  # the table's name reached the task's environment
    _consumes_everything(run)
    run.worker.terminate()
    assert run.worker.stop() == 0, run.worker.tail()
    _landed_everything(run, run.emulators)
    dynamodb = run.emulators.client("dynamodb")
    items = dynamodb.scan(TableName=run.task_env["ACME_ORDERS"], ConsistentRead=True)["Items"]
    assert {i["id"]["S"] for i in items} == {f"key-{n}" for n in range(RECORDS_PER_STREAM)}
    assert {i["api"]["S"] for i in items} == {API_URL}  # its own setting reached the process

    # A changed project: another image, so ECS rolls the fleet onto it.
    (project / "src" / "acme_orders" / "proc.py").write_text(PROCESSOR + "# version 2\n")
    assert _image(_synth(project, tmp_path / "three" / "cdk.out"))[2] != image
