"""cdk-nag suppressions shared by several constructs; each one is scoped to a single resource and says why."""

from __future__ import annotations

from aws_cdk import Stack
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import IConstruct

__all__ = ["suppress_bucket_deployment_handler", "suppress_grant_wildcards"]

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


def suppress_bucket_deployment_handler(stack: Stack) -> None:
    """The Lambda that ``BucketDeployment`` adds (one per stack): CDK owns its runtime and policies."""
    path = f"/{stack.node.path}/Custom::CDKBucketDeployment8693BB64968944B69AAFB0CC9EB8756C"
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
                applies_to=[
                    "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
                ],
            ),
            NagPackSuppression(
                id="AwsSolutions-IAM5",
                reason="The handler copies the job-code asset from the CDK assets bucket into the artifacts "
                "bucket: read on the assets bucket's objects, write on the artifacts bucket's objects.",
                applies_to=[
                    *_GRANT_ACTION_FAMILIES,
                    "Resource::arn:<AWS::Partition>:s3:::cdk-hnb659fds-assets-<AWS::AccountId>-<AWS::Region>/*",
                    {"regex": "/^Resource::<DataLakeArtifacts[0-9A-F]+\\.Arn>\\/\\*$/"},
                ],
            ),
        ],
        apply_to_children=True,
    )
