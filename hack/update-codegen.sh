#!/usr/bin/env bash
# Regenerates the deep-copy functions (zz_generated.deepcopy.go) of every API
# package below api/. Idempotent: running it twice changes nothing.
#
# The generator is the pinned controller-gen (hack/controller-gen.sh).
#
# Usage: hack/update-codegen.sh [output-dir]
#   With output-dir, the files are written below output-dir (mirroring api/)
#   instead of in place; hack/verify-codegen.sh uses that.

set -o errexit
set -o nounset
set -o pipefail

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
    hack/controller-gen.sh object paths="./${pkg}" output:object:dir="${OUTPUT_DIR}/${pkg}"
  else
    hack/controller-gen.sh object paths="./${pkg}"
  fi
done
