#!/usr/bin/env bash
# Build the local CPU serving image, without any registry:
#   debootstrap bookworm (minbase + python3) -> docker import -> images/cpu/Dockerfile
#   (the reference stack from a wheelhouse built here, tritonserver at /opt/tritonserver/bin).
# Usage: images/build-cpu-image.sh [--rebuild]       prints the image reference on its last line
# Env:   IMAGE (default pytest-triton-llm/cpu:<triton version>), PYTHON (default .venv/bin/python,
#        a Python of the image's minor version that has pytest-triton-llm[reference] installed),
#        IMAGE_WORK (default ~/.cache/pytest-triton-llm/images: rootfs tarball and wheelhouse).
set -euo pipefail
cd "$(dirname "$0")/.."

rebuild=0
[ "${1:-}" = "--rebuild" ] && rebuild=1
PYTHON=${PYTHON:-.venv/bin/python}
WORK=${IMAGE_WORK:-$HOME/.cache/pytest-triton-llm/images}
SUITE=bookworm
PYTHON_MINOR=3.11   # bookworm's python3
say() { echo "[build-cpu-image] $*" >&2; }
fail() { echo "[build-cpu-image] ERROR: $*" >&2; exit 1; }

command -v docker > /dev/null || fail "docker is not installed (Debian: apt-get install docker.io)"
docker info > /dev/null 2>&1 || fail "no docker daemon answers (start dockerd, or check DOCKER_HOST)"
[ -x "$PYTHON" ] || fail "$PYTHON not found: create the venv first (see README Quickstart) or set PYTHON"
host_minor=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
[ "$host_minor" = "$PYTHON_MINOR" ] || \
  fail "the wheelhouse must be built by Python $PYTHON_MINOR (the image's), not $host_minor: set PYTHON"
triton_version=$("$PYTHON" -c 'from pytest_triton_llm.stack.runtimes.tritonserver_wheel import locate; print(locate().triton_version)')
IMAGE=${IMAGE:-pytest-triton-llm/cpu:$triton_version}
BASE=pytest-triton-llm/base:$SUITE-python$PYTHON_MINOR

if [ $rebuild = 0 ] && docker image inspect "$IMAGE" > /dev/null 2>&1; then
  say "$IMAGE exists (pass --rebuild to build it again)"
  echo "$IMAGE"; exit 0
fi
mkdir -p "$WORK"

if [ $rebuild = 1 ] || ! docker image inspect "$BASE" > /dev/null 2>&1; then
  command -v debootstrap > /dev/null || fail "debootstrap is not installed (Debian: apt-get install debootstrap)"
  rootfs_tar="$WORK/$SUITE-minbase-python.tar"
  if [ ! -s "$rootfs_tar" ] || [ $rebuild = 1 ]; then
    rootfs=$(mktemp -d "$WORK/rootfs.XXXXXX")
    say "debootstrap $SUITE (minbase + python3) into $rootfs; takes a few minutes"
    start=$SECONDS
    debootstrap --variant=minbase --include=python3,python3-venv,libpython3.11,ca-certificates \
      "$SUITE" "$rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" > "$WORK/debootstrap.log" 2>&1 \
      || { tail -20 "$WORK/debootstrap.log" >&2; rm -rf "$rootfs"; fail "debootstrap failed (log: $WORK/debootstrap.log)"; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -cf "$rootfs_tar.partial" . && mv "$rootfs_tar.partial" "$rootfs_tar"
    rm -rf "$rootfs"
    say "rootfs ready in $((SECONDS - start)) s: $rootfs_tar ($(du -h "$rootfs_tar" | cut -f1))"
  fi
  say "docker import -> $BASE"
  docker import "$rootfs_tar" "$BASE" > /dev/null
fi

context=$(mktemp -d "$WORK/context.XXXXXX")
trap 'rm -rf "$context"' EXIT
say "wheelhouse: pytest-triton-llm[reference,test] and its pinned dependencies (constraints.txt)"
start=$SECONDS
"$PYTHON" -m pip wheel -q --disable-pip-version-check -c constraints.txt -w "$context/wheels" ".[reference,test]"
say "wheelhouse ready in $((SECONDS - start)) s ($(du -sh "$context/wheels" | cut -f1))"
cp images/cpu/Dockerfile "$context/"

say "docker build -> $IMAGE"
start=$SECONDS
DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$BASE" --build-arg "TRITON_VERSION=$triton_version" \
  --build-arg "PYTHON_MINOR=$PYTHON_MINOR" -t "$IMAGE" "$context" > /dev/null
say "built $IMAGE in $((SECONDS - start)) s ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
echo "$IMAGE"
