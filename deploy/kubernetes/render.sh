#!/usr/bin/env bash
# Render one overlay with the image's tag: render.sh dev|staging|production VERSION [REGISTRY]
#
#   deploy/kubernetes/render.sh production "$(git describe --always)" registry.example/omnium \
#     | kubectl apply -f -
#
# The tag is not written in the overlays: a small kustomization made here puts the overlay
# under an `images` entry, as `kustomize edit set image` would in a release job. It runs
# `kustomize build` when kustomize is installed, else `kubectl kustomize` (Debian's kubectl
# has kustomize 2.0 inside, which is why the overlays say `bases`).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: render.sh dev|staging|production VERSION [IMAGE_NAME]" >&2; exit 2; }
overlay=$(cd "$(dirname "$0")" && pwd)/overlays/$1
version=$2
name=${3:-omnium}
[ -f "$overlay/kustomization.yaml" ] || { echo "render.sh: no overlay $1 (dev, staging, production)" >&2; exit 2; }
case "$version" in
  "" | latest) echo "render.sh: a release names its version, never '${version:-an empty one}'" >&2; exit 2 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Kustomize reads a base by a path relative to the kustomization; a link keeps it inside.
ln -s "$overlay" "$work/overlay"
cat >"$work/kustomization.yaml" <<KUSTOMIZATION
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
bases:
  - overlay
images:
  - name: omnium
    newName: $name
    newTag: "$version"
KUSTOMIZATION
if command -v kustomize >/dev/null; then
  kustomize build "$work"
else
  kubectl kustomize "$work"
fi
