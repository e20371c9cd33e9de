#!/usr/bin/env bash
# Run pytest inside a serving image, as a nightly GPU CI job does inside
# nvcr.io/nvidia/tritonserver:YY.MM-trtllm-python-py3: the image's own tritonserver
# (/opt/tritonserver/bin) and Python, no docker inside the container.
# Usage: images/pytest-in-image.sh IMAGE [pytest args...]
#   The checkout is mounted read-only at /src (its code is imported through PYTHONPATH), ./out
#   read-write at /src/out (reports), and the host's engine cache at /cache, so engines built once are
#   reused; server logs stay in out/in-image-tmp. No network: the image and the cache hold all it needs.
# Env: ENGINE_CACHE (default ~/.cache/pytest-triton-llm), DOCKER_RUN_ARGS (extra docker run arguments,
#   e.g. "--gpus all" for an NGC image).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 IMAGE [pytest args...]" >&2; exit 2; }
image=$1
shift
cache=${ENGINE_CACHE:-$HOME/.cache/pytest-triton-llm}
mkdir -p out "$cache"
# shellcheck disable=SC2086  # DOCKER_RUN_ARGS is a list of arguments
# DOCKER_RUN_ARGS come last, so that they may replace an --env given here (e.g. PYTHONPATH)
exec docker run --rm --network none --shm-size=2g \
  --volume "$PWD:/src:ro" --volume "$PWD/out:/src/out:rw" --volume "$cache:/cache:rw" \
  --env PYTHONPATH=/src --env PYTHONDONTWRITEBYTECODE=1 --workdir /src ${DOCKER_RUN_ARGS:-} \
  "$image" python3 -m pytest -p no:cacheprovider --engines-cache /cache --basetemp /src/out/in-image-tmp "$@"
