#!/usr/bin/env bash
# `make image`: build the one omnium image from the root Dockerfile with podman, tagged with the
# version, never `latest`, and print the tag on the last line.
#
#   deploy/image/build.sh            build localhost/omnium:<version> unless it is there already
#   OMNIUM_IMAGE_BASE=python:3.11-slim-bookworm@sha256:...   build on that base (a registry)
#
# The version is `git describe --always --dirty`; a dirty tree adds a hash of its diff, so the
# tag names the sources it was built from and a second build of the same sources is skipped.
# With no base named, the base is Debian bookworm's own Python 3.11, made here with mmdebstrap
# and imported into podman: no container registry is needed. The pinned wheels are downloaded
# on this machine (hashes checked) into the build context and installed in the build with
# --no-index, which is also how an air-gapped build works.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Podman as it runs on these machines: crun fails on their cgroups, and the default rlimits
# are refused.
PODMAN=(podman --cgroup-manager=cgroupfs --runtime runc)
LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
BASE_TAG=localhost/omnium-base:bookworm
WHEELS=deploy/image/wheels
PY=${PY:-.venv/bin/python}

version() {
  local described
  described=$(git describe --always --dirty --tags)
  if [[ $described == *-dirty ]]; then
    described+=-$( (git diff HEAD; git ls-files --others --exclude-standard) | sha256sum | cut -c1-8)
  fi
  printf '%s' "$described"
}

base() {
  if "${PODMAN[@]}" image exists "$BASE_TAG"; then
    return
  fi
  local dir
  dir=$(mktemp -d)
  # Cleared as it runs: a RETURN trap outlives the function, and $dir is gone by the next return.
  trap 'rm -rf "$dir"; trap - RETURN' RETURN
  echo "build.sh: making the base $BASE_TAG with mmdebstrap (Debian bookworm, Python 3.11)" >&2
  # passwd: the production stage's groupadd and useradd; python3-venv: ensurepip for the venvs.
  mmdebstrap --quiet --variant=minbase \
    --include=python3,python3-venv,ca-certificates,passwd bookworm "$dir/base.tar"
  "${PODMAN[@]}" import "$dir/base.tar" "$BASE_TAG" >/dev/null
}

wheels() {
  rm -rf "$WHEELS"
  mkdir -p "$WHEELS"
  # Exactly the locked files (hashes), wheels only, for the base's Python 3.11 on Linux.
  "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
    --only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_34_x86_64 --platform linux_x86_64 --implementation cp \
    --dest "$WHEELS" -r requirements/runtime.txt -r requirements/build.txt
}

main() {
  local tag
  tag=localhost/omnium:$(version)
  if "${PODMAN[@]}" image exists "$tag" && [ -z "${OMNIUM_IMAGE_REBUILD:-}" ]; then
    echo "build.sh: $tag is built already (OMNIUM_IMAGE_REBUILD=1 builds it again)" >&2
    echo "$tag"
    return
  fi
  local from=${OMNIUM_IMAGE_BASE:-}
  if [ -z "$from" ]; then
    base
    from=$BASE_TAG
  fi
  wheels
  "${PODMAN[@]}" build --network host "${LIMITS[@]}" --build-arg "PYTHON_IMAGE=$from" \
    --label "org.opencontainers.image.version=${tag#*:}" --tag "$tag" --file Dockerfile . >&2
  echo "$tag"
}

main
