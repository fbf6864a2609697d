"""cdk-nag suppressions and checkov skips; each one is scoped to a single resource and says why.

checkov reads its skips from the template: ``Metadata.checkov.skip`` of the resource, each with an ``id`` and
a ``comment`` (the reason). :func:`skip_checkov` writes them; ``tests/infra/test_checkov.py`` fails on any
finding that is neither fixed nor skipped there, and on a skip without a reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import CfnResource, Stack
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import IConstruct

__all__ = [
    "LOG_GROUP_NOT_KMS",
    "skip_checkov",
    "suppress_bucket_deployment_handler",
    "suppress_cdk_vpc_handler",
    "suppress_grant_wildcards",
]

# A CloudWatch Logs group with the service's own encryption at rest rather than a customer managed key.
LOG_GROUP_NOT_KMS = {
    "CKV_AWS_158": "CloudWatch Logs encrypts every group at rest; these hold operational events, EMF metrics, "
    "flow records or Spark driver output, never record payloads or secrets, so a customer managed key (with a "
    "key policy for the logs service in every stack) would protect nothing more.",
}

# CDK's deploy-time custom-resource handlers: CloudFormation invokes them, once per deploy.
_CDK_HANDLER = {
    "CKV_AWS_115": "A deploy-time handler CDK generates; CloudFormation calls it once per deploy, so no "
    "reserved concurrency is needed.",
    "CKV_AWS_116": "CloudFormation invokes the handler synchronously and reports its failure as the stack "
    "event; a dead-letter queue would receive nothing.",
    "CKV_AWS_117": "The handler calls only AWS APIs (S3, EC2) during deploys; a VPC would add ENIs and NAT "
    "traffic and protect nothing.",
    "CKV_AWS_173": "The handler's environment holds no secret (CDK sets only non-secret configuration), so the "
    "default encryption at rest suffices.",
}


def skip_checkov(construct: IConstruct, checks: Mapping[str, str]) -> None:
    """Record checkov skips (check id -> reason) on ``construct`` (a CfnResource or an L2 with one)."""
    resource = construct if isinstance(construct, CfnResource) else construct.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{construct.node.path}: no CloudFormation resource to put checkov skips on")
    current: dict[str, Any] = resource.get_metadata("checkov") or {}
    skips = [s for s in current.get("skip", []) if s["id"] not in checks]
    skips.extend({"id": check, "comment": reason} for check, reason in checks.items())
    resource.add_metadata("checkov", {"skip": skips})


# The actions CDK's grant methods spell with wildcards (kms:GenerateDataKey* covers the
# GenerateDataKey variants, s3:Abort* is AbortMultipartUpload, ...): each names a family of one operation.
_GRANT_ACTION_FAMILIES = (
    "Action::kms:GenerateDataKey*",
    "Action::kms:ReEncrypt*",
    "Action::s3:Abort*",
    "Action::s3:DeleteObject*",
    "Action::s3:GetBucket*",
    "Action::s3:GetObject*",
    "Action::s3:List*",
)


def suppress_grant_wildcards(policy_owner: IConstruct, *, objects: list[str], reason: str) -> None:
    """IAM5 on a role's policy made by ``grant*`` calls: action families, and object ARNs under ``objects``.

    ``objects`` are regexes for the object-level resources (``<Bucket.Arn>/prefix/*``) the role may touch.
    """
    NagSuppressions.add_resource_suppressions(
        policy_owner,
        [
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason=reason,
                applies_to=[*_GRANT_ACTION_FAMILIES, *({"regex": f"/^Resource::{o}$/"} for o in objects)],
            )
        ],
        apply_to_children=True,
    )


def suppress_cdk_vpc_handler(stack: Stack) -> None:
    """The handler behind ``@aws-cdk/aws-ec2:restrictDefaultSecurityGroup`` (one per stack with a VPC)."""
    provider = stack.node.find_child("Custom::VpcRestrictDefaultSGCustomResourceProvider")
    skip_checkov(
        provider.node.find_child("Handler"),
        {k: _CDK_HANDLER[k] for k in ("CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117")},
    )


def suppress_bucket_deployment_handler(stack: Stack) -> None:
    """The Lambda that ``BucketDeployment`` adds (one per stack): CDK owns its runtime and policies."""
    handler_id = "Custom::CDKBucketDeployment8693BB64968944B69AAFB0CC9EB8756C"
    handler = stack.node.find_child(handler_id)
    skip_checkov(handler, _CDK_HANDLER)
    skip_checkov(handler.node.find_child("LogGroup"), LOG_GROUP_NOT_KMS)
    path = f"/{stack.node.path}/{handler_id}"
    NagSuppressions.add_resource_suppressions_by_path(
        stack,
        path,
        [
            NagPackSuppression(
                id="AwsSolutions-L1",
                reason="CDK pins the BucketDeployment handler's runtime; it runs only during deploys.",
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM4",
                reason="AWSLambdaBasicExecutionRole only lets the deploy-time handler write its own logs.",
                # The partition is a literal once the stage names its region (partition literals are on).
                applies_to=[
                    {
                        "regex": "/^Policy::arn:(<AWS::Partition>|aws[a-z-]*):iam::aws:policy\\/service-role\\/"
                        "AWSLambdaBasicExecutionRole$/"
                    }
                ],
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="The handler copies the job-code asset from the CDK assets bucket into the artifacts "
                "bucket: read on the assets bucket's objects, write on the artifacts bucket's objects.",
                applies_to=[
                    *_GRANT_ACTION_FAMILIES,
                    # Tokens in an environment-agnostic stage; literals where cdk.json names account and region.
                    {
                        "regex": "/^Resource::arn:(<AWS::Partition>|aws[a-z-]*):s3:::cdk-hnb659fds-assets-"
                        "(<AWS::AccountId>|\\d{12})-(<AWS::Region>|[a-z0-9-]+)\\/\\*$/"
                    },
                    {"regex": "/^Resource::<DataLakeArtifacts[0-9A-F]+\\.Arn>\\/\\*$/"},
                ],
            ),
        ],
        apply_to_children=True,
    )
