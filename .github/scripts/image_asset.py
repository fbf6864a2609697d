"""The consumer image asset of a synthesized cloud assembly, for building it once and deploying it everywhere.

``python .github/scripts/image_asset.py cdk.out`` prints shell assignments (IMAGE_TAG, IMAGE_CONTEXT,
IMAGE_DOCKERFILE, IMAGE_PLATFORM). The tag is the one cdk-assets builds under (``cdkasset-<asset id>``): when an
image with that tag is already loaded, ``cdk deploy`` pushes it instead of building it again. Every
environment's assembly must name the same asset, or one build could not serve them all.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path


def image_asset(cdk_out: Path) -> dict[str, str]:
    found: dict[str, dict[str, str]] = {}
    for manifest in sorted(cdk_out.glob("assembly-*/*.assets.json")):
        for asset_id, image in json.loads(manifest.read_text()).get("dockerImages", {}).items():
            source = image["source"]
            found[asset_id] = {
                "IMAGE_TAG": f"cdkasset-{asset_id.lower()}",
                "IMAGE_CONTEXT": str((manifest.parent / source["directory"]).resolve()),
                "IMAGE_DOCKERFILE": source.get("dockerFile", "Dockerfile"),
                "IMAGE_PLATFORM": source.get("platform", "linux/amd64"),
            }
    if len(found) != 1:
        raise SystemExit(f"expected one container image asset across {cdk_out}, found {sorted(found)}")
    return next(iter(found.values()))


def main(argv: list[str]) -> int:
    for key, value in image_asset(Path(argv[1] if len(argv) > 1 else "cdk.out")).items():
        print(f"{key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
