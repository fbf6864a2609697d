#!/usr/bin/env python3
"""The CDK app: one stage per environment in ``cdk.json`` (context ``environments``).

``python app.py`` (``make synth``) synthesizes every environment into ``cdk.out``; ``cdk deploy -c env=dev
'dev/*'`` synthesizes and deploys only dev. ``python app.py`` does not go through the CDK CLI, so the context in
``cdk.json`` is passed to the app explicitly; context given on the CLI (``-c``) still wins.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from aws_cdk import App

from stacks.config import ConfigError, load_environments, select_environments
from stacks.image_context import check_processor_code
from stacks.stage import FleetStage, SourcePaths

ROOT = Path(__file__).resolve().parent


def cdk_json_context(root: Path = ROOT) -> dict[str, Any]:
    """The ``context`` block of ``cdk.json``: environment settings and feature flags."""
    context: dict[str, Any] = json.loads((root / "cdk.json").read_text())["context"]
    return context


def build(app: App, root: Path = ROOT, spark_jobs: Path | None = None) -> list[FleetStage]:
    """Add a stage for every environment, or for the one chosen with ``-c env=<name>``.

    Every chosen environment's settings, and its processor's code, are checked before the first stage is built.
    """
    environments = load_environments(app.node.try_get_context("environments"))
    chosen = select_environments(environments, app.node.try_get_context("env"))
    for settings in chosen:
        check_processor_code(settings, root)
    sources = SourcePaths(root=root, spark_jobs=spark_jobs or root / "spark_jobs")
    return [FleetStage(app, settings.name, settings=settings, sources=sources) for settings in chosen]


def main() -> int:
    """Synthesize; a bad ``cdk.json`` value stops it with one line naming the key (exit 2), no traceback."""
    # Under the CDK CLI the assembly goes where the CLI says (CDK_OUTDIR); run directly, into ./cdk.out.
    outdir = None if "CDK_OUTDIR" in os.environ else str(ROOT / "cdk.out")
    app = App(context=cdk_json_context(), outdir=outdir)
    try:
        build(app)
    except ConfigError as exc:
        print(f"error: cdk.json context {exc}", file=sys.stderr)
        return 2
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
