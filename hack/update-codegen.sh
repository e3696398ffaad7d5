#!/usr/bin/env bash
# Regenerates the deep-copy functions (zz_generated.deepcopy.go) of every API
# package below api/. Idempotent: running it twice changes nothing.
#
# The generator is run with "go run <module>@<version>", which builds the
# pinned version outside this module: go.mod and go.sum are not touched.
#
# Usage: hack/update-codegen.sh [output-dir]
#   With output-dir, the files are written below output-dir (mirroring api/)
#   instead of in place; hack/verify-codegen.sh uses that.

set -o errexit
set -o nounset
set -o pipefail

CONTROLLER_TOOLS_VERSION="v0.23.0"
CONTROLLER_GEN="sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_TOOLS_VERSION}"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

OUTPUT_DIR="${1:-}"

# Every package that asks for generated deep-copy functions.
packages="$(grep -rl --include=doc.go '+kubebuilder:object:generate=true' api | xargs -r -n1 dirname | sort -u)"
if [[ -z "${packages}" ]]; then
  echo "no package below api/ has a +kubebuilder:object:generate=true marker" >&2
  exit 1
fi

for pkg in ${packages}; do
  if [[ -n "${OUTPUT_DIR}" ]]; then
    mkdir -p "${OUTPUT_DIR}/${pkg}"
    go run "${CONTROLLER_GEN}" object paths="./${pkg}" output:object:dir="${OUTPUT_DIR}/${pkg}"
  else
    go run "${CONTROLLER_GEN}" object paths="./${pkg}"
  fi
done
