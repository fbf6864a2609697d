"""Ships ``spark_jobs/`` to S3 at deploy: the entry files, plus the package zipped for ``--py-files``."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from constructs import Construct

__all__ = ["ENTRY_POINTS", "SparkJobsCode", "bundle_spark_jobs"]

ENTRY_POINTS = ("compact", "aggregate")
PACKAGE_ZIP = "spark_jobs.zip"
_SKIP_PARTS = {"__pycache__", "tests"}
# Fixed timestamps make the zip byte-identical for identical sources.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def bundle_spark_jobs(source: Path, output: Path) -> None:
    """Write ``<entry>.py`` for each entry point and ``spark_jobs.zip`` (package at the zip's root) to ``output``."""
    missing = [f"{name}.py" for name in ENTRY_POINTS if not (source / f"{name}.py").is_file()]
    if missing:
        raise FileNotFoundError(f"{source}: missing Spark entry file(s) {', '.join(missing)}")
    for name in ENTRY_POINTS:
        shutil.copyfile(source / f"{name}.py", output / f"{name}.py")
    files = sorted(
        p for p in source.rglob("*.py") if not _SKIP_PARTS.intersection(p.relative_to(source).parts)
    )
    with zipfile.ZipFile(output / PACKAGE_ZIP, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            info = zipfile.ZipInfo(f"{source.name}/{path.relative_to(source).as_posix()}", _ZIP_DATE)
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)


@jsii.implements(ILocalBundling)
class _LocalBundler:
    """Bundles in-process at synth, so no Docker engine is needed."""

    def __init__(self, source: Path) -> None:
        self._source = source

    def try_bundle(self, output_dir: str, *args: Any, **kwargs: Any) -> bool:
        bundle_spark_jobs(self._source, Path(output_dir))
        return True


class SparkJobsCode(Construct):
    """Deploys the bundle under ``prefix`` in the artifacts bucket; exposes the URIs the job run needs."""

    def __init__(
        self, scope: Construct, id: str, *, source: Path, bucket: s3.IBucket, prefix: str = "spark"
    ) -> None:
        super().__init__(scope, id)
        if source.name != "spark_jobs" or not source.is_dir():
            raise FileNotFoundError(f"{source}: expected the spark_jobs package directory")
        asset = s3deploy.Source.asset(
            str(source),
            asset_hash_type=AssetHashType.SOURCE,
            exclude=["**/__pycache__", "**/*.pyc", "tests"],
            bundling=BundlingOptions(
                # Never pulled: the local bundler always succeeds or raises.
                image=DockerImage.from_registry("public.ecr.aws/docker/library/python:3.11-slim"),
                local=_LocalBundler(source),
            ),
        )
        self.deployment = s3deploy.BucketDeployment(
            self,
            "Deploy",
            sources=[asset],
            destination_bucket=bucket,
            destination_key_prefix=f"{prefix}/",
            prune=True,
        )
        base = f"s3://{bucket.bucket_name}/{prefix}"
        self.entry_point_uris = {name: f"{base}/{name}.py" for name in ENTRY_POINTS}
        self.package_uri = f"{base}/{PACKAGE_ZIP}"
