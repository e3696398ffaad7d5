#!/usr/bin/env bash
# Regenerates the CustomResourceDefinitions of every API package below api/
# (OpenAPI schema, CEL validation rules, printer columns) into the Helm
# chart's crds/ directory, the one copy checked in: the plain manifests in
# deployments/manifests are rendered from the chart (hack/render-manifests.sh).
# Idempotent: running it twice changes nothing.
#
# The generator is the pinned controller-gen (hack/controller-gen.sh).
#
# Usage: hack/update-crds.sh [output-dir]
#   With output-dir the CRDs are written there instead (hack/verify-crds.sh
#   uses that).
set -o errexit
set -o nounset
set -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

CRD_DIR="deployments/helm/fpga-dra-driver/crds"
OUTPUT_DIR="${1:-${CRD_DIR}}"

mkdir -p "${OUTPUT_DIR}"
# Start from an empty directory so a CRD whose type was removed goes too.
find "${OUTPUT_DIR}" -maxdepth 1 -name '*.yaml' -delete
hack/controller-gen.sh crd:crdVersions=v1 paths=./api/... output:crd:dir="${OUTPUT_DIR}"
