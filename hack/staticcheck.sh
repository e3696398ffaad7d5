#!/usr/bin/env bash
# Runs the pinned staticcheck with the given arguments, building it with
# "go install" into bin/tools/ on first use. $STATICCHECK overrides the
# binary.
#
# Usage: hack/staticcheck.sh ARGS...
set -o errexit
set -o nounset
set -o pipefail

STATICCHECK_VERSION="v0.8.2" # staticcheck 2026.2.2

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${STATICCHECK:-}" ]]; then
  exec "${STATICCHECK}" "$@"
fi
tools="${REPO_ROOT}/bin/tools/staticcheck-${STATICCHECK_VERSION}"
if [[ ! -x "${tools}/staticcheck" ]]; then
  echo "building staticcheck ${STATICCHECK_VERSION} into ${tools} (once)" >&2
  GOBIN="${tools}" go install "honnef.co/go/tools/cmd/staticcheck@${STATICCHECK_VERSION}"
fi
exec "${tools}/staticcheck" "$@"
