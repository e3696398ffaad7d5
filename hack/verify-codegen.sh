#!/usr/bin/env bash
# Fails when a generated file below api/ differs from what
# hack/update-codegen.sh would write. Changes nothing in the tree.

set -o errexit
set -o nounset
set -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

hack/update-codegen.sh "${tmp}"

stale=0
while IFS= read -r generated; do
  rel="${generated#"${tmp}/"}"
  if ! diff -u "${rel}" "${generated}"; then
    stale=1
  fi
done < <(find "${tmp}" -type f -name 'zz_generated.*.go' | sort)

# A generated file in the tree that the generator no longer writes is stale too.
while IFS= read -r committed; do
  if [[ ! -f "${tmp}/${committed}" ]]; then
    echo "${committed}: no longer generated; remove it" >&2
    stale=1
  fi
done < <(find api -type f -name 'zz_generated.*.go' | sort)

if [[ "${stale}" -ne 0 ]]; then
  echo "generated files are stale: run hack/update-codegen.sh" >&2
  exit 1
fi
echo "generated files are up to date"
