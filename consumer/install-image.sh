#!/bin/sh
# Installs the consumer and your processor project into a fresh virtualenv, from hashed pins only.
#
#   [PROCESSOR=<module>:<Class>] sh consumer/install-image.sh CONTEXT VENV BUILDER
#
# CONTEXT is the image build context the CDK app assembles (stacks/image_context.py); VENV the virtualenv the
# image runs (no pip, no setuptools in it); BUILDER a scratch virtualenv with pip and the pinned build backend.
# consumer/Dockerfile runs this in its build stage; tests/infra runs the same script on the synthesized context
# (there is no Docker daemon there), so what the tests install is what the image installs.
set -eu

context=$1
venv=$2
builder=$3
python=${PYTHON:-python3}
wheels=$builder/wheels
project=$context/processor

# The builder: pip and the build backend (setuptools, pinned and hashed); it never reaches the image.
"$python" -m venv "$builder"
"$builder/bin/python" -m pip install --quiet --require-hashes --only-binary=:all: -r "$context/requirements/build.lock"
into() { "$builder/bin/python" -m pip --python "$venv/bin/python" "$@"; }

# The runtime virtualenv, without pip: every dependency from the hashed lock, as wheels, nothing resolved.
"$python" -m venv --without-pip "$venv"
into install --quiet --require-hashes --no-deps --only-binary=:all: -r "$context/requirements/consumer.lock"

# The consumer package, built with the pinned backend (no build isolation: nothing newer is fetched).
"$builder/bin/python" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$wheels" "$context"

# Your processor: its own hashed requirements.txt first, then the project itself (or its code on the path).
if [ -f "$project/requirements.txt" ]; then
  into install --quiet --require-hashes --no-deps -r "$project/requirements.txt"
fi
if [ -f "$project/pyproject.toml" ]; then
  "$builder/bin/python" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$wheels" "$project"
elif [ -f "$project/requirements.txt" ]; then
  cp -R "$project" "$venv/processor"
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  for base in "$venv/processor/src" "$venv/processor"; do
    if [ -d "$base" ]; then echo "$base" > "$site/processor.pth"; break; fi
  done
fi
into install --quiet --no-deps --no-index "$wheels"/*.whl

# Every dependency any installed distribution declares is present (a project's missing pin fails here).
into check

# The processor the task will run (PROCESSOR, the Dockerfile's build argument) imports from the virtualenv
# alone (-I: not from this folder), as the worker loads it at start: one line and a failed build otherwise.
if [ -n "${PROCESSOR:-}" ]; then
  "$venv/bin/python" -I -c '
import sys
from consumer.errors import ProcessorLoadError
from consumer.loader import load_processor
try:
    load_processor(sys.argv[1])
except ProcessorLoadError as exc:
    sys.exit(f"error: consumer.processor (build argument PROCESSOR): {exc}")
' "$PROCESSOR"
fi
