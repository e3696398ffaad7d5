#!/usr/bin/env bash
# Fails when the CRDs in the Helm chart differ from what hack/update-crds.sh
# would write from the Go types below api/. Changes nothing in the tree.
set -o errexit
set -o nounset
set -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

CRD_DIR="deployments/helm/fpga-dra-driver/crds"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

hack/update-crds.sh "${tmp}"
if ! diff -ru "${CRD_DIR}" "${tmp}"; then
  echo "CRDs in ${CRD_DIR} are stale: run hack/update-crds.sh (make crds), then make manifests" >&2
  exit 1
fi
echo "CRDs are up to date"
