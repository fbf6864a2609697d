"""The consumer image assets of a synthesized cloud assembly, for building each once and deploying it everywhere.

``python .github/scripts/image_asset.py cdk.out`` prints one tab-separated line per distinct image: the tag
cdk-assets builds under (``cdkasset-<asset id>``: when an image with that tag is already loaded, ``cdk deploy``
pushes it instead of building it again), the build context, the Dockerfile in it and the platform. Environments
whose build contexts are identical (same consumer, same processor project) share one asset, so one build.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def image_assets(cdk_out: Path) -> dict[str, dict[str, str]]:
    """Asset id -> its tag, context, Dockerfile and platform, across every environment's assembly."""
    found: dict[str, dict[str, str]] = {}
    for manifest in sorted(cdk_out.glob("assembly-*/*.assets.json")):
        for asset_id, image in json.loads(manifest.read_text()).get("dockerImages", {}).items():
            source = image["source"]
            found[asset_id] = {
                "tag": f"cdkasset-{asset_id.lower()}",
                "context": str((manifest.parent / source["directory"]).resolve()),
                "dockerfile": source.get("dockerFile", "Dockerfile"),
                "platform": source.get("platform", "linux/amd64"),
            }
    if not found:
        raise SystemExit(f"no container image asset in {cdk_out}")
    return found


def main(argv: list[str]) -> int:
    for image in image_assets(Path(argv[1] if len(argv) > 1 else "cdk.out")).values():
        print("\t".join((image["tag"], image["context"], image["dockerfile"], image["platform"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
