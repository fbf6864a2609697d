#!/usr/bin/env python3
"""The CDK app: one stage per environment in ``cdk.json`` (context ``environments``).

``python app.py`` (``make synth``) synthesizes every environment into ``cdk.out``; ``cdk deploy -c env=dev
'dev/*'`` synthesizes and deploys only dev. ``python app.py`` does not go through the CDK CLI, so the context in
``cdk.json`` is passed to the app explicitly; context given on the CLI (``-c``) still wins.

The settings are checked before the CDK is loaded: a bad ``cdk.json`` value fails in about a second, without
starting the CDK's Node.js process (several seconds) first.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stacks.config import ConfigError, EnvironmentSettings, load_environments, select_environments
from stacks.image_context import check_processor_code

if TYPE_CHECKING:
    from aws_cdk import App

    from stacks.stage import FleetStage

ROOT = Path(__file__).resolve().parent
#: Where the CDK CLI puts the context it gives an app (``-c`` values, cdk.context.json): a JSON object in this
#: variable, or, when it is too large for the environment, in the file this one names. ``App`` reads both.
CONTEXT_ENV = "CDK_CONTEXT_JSON"
CONTEXT_OVERFLOW_ENV = "CONTEXT_OVERFLOW_LOCATION_ENV"


def cdk_json_context(root: Path = ROOT) -> dict[str, Any]:
    """The ``context`` block of ``cdk.json``: environment settings and feature flags."""
    context: dict[str, Any] = json.loads((root / "cdk.json").read_text())["context"]
    return context


def app_context(root: Path = ROOT, environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The context ``App(context=cdk_json_context())`` gives this app: ``cdk.json``'s, each top-level key
    replaced by the CDK CLI's (``CDK_CONTEXT_JSON``, then the overflow file) as ``App`` merges them, and with the
    members that are ``null`` left out, as they come back from the CDK's Node.js process."""
    context = cdk_json_context(root)
    if given := environ.get(CONTEXT_ENV):
        context.update(json.loads(given))
    if overflow := environ.get(CONTEXT_OVERFLOW_ENV):
        context.update(json.loads(Path(overflow).read_text()))
    without_nulls: dict[str, Any] = _without_nulls(context)
    return without_nulls


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(member) for key, member in value.items() if member is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def checked_environments(context: Mapping[str, Any], root: Path = ROOT) -> list[EnvironmentSettings]:
    """The environments to synthesize (every one, or the one ``env`` names), each with its settings and its
    processor's code checked; a bad value raises :class:`ConfigError` naming its ``cdk.json`` key."""
    chosen = select_environments(load_environments(context.get("environments")), context.get("env"))
    for settings in chosen:
        check_processor_code(settings, root)
    return chosen


def build(
    app: App,
    root: Path = ROOT,
    spark_jobs: Path | None = None,
    chosen: list[EnvironmentSettings] | None = None,
) -> list[FleetStage]:
    """Add a stage for every environment, or for the one chosen with ``-c env=<name>``.

    Every chosen environment's settings, and its processor's code, are checked before the first stage is built;
    ``chosen``: environments :func:`checked_environments` already returned for the app's context.
    """
    from stacks.stage import FleetStage, SourcePaths

    if chosen is None:
        chosen = checked_environments(
            {key: app.node.try_get_context(key) for key in ("environments", "env")}, root
        )
    sources = SourcePaths(root=root, spark_jobs=spark_jobs or root / "spark_jobs")
    return [FleetStage(app, settings.name, settings=settings, sources=sources) for settings in chosen]


def main() -> int:
    """Synthesize; a bad ``cdk.json`` value stops it with one line naming the key (exit 2), no traceback."""
    try:
        chosen = checked_environments(app_context())  # before the CDK's Node.js process starts
    except ConfigError as exc:
        print(f"error: cdk.json context {exc}", file=sys.stderr)
        return 2
    from aws_cdk import App

    # Under the CDK CLI the assembly goes where the CLI says (CDK_OUTDIR); run directly, into ./cdk.out.
    outdir = None if "CDK_OUTDIR" in os.environ else str(ROOT / "cdk.out")
    app = App(context=cdk_json_context(), outdir=outdir)
    build(app, chosen=chosen)
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())
