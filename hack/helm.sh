#!/usr/bin/env bash
# Runs the pinned Helm with the given arguments, building it with
# "go install" into bin/tools/ on first use (no Debian package ships Helm,
# and the Go module proxy is reachable where a release download is not).
# $HELM overrides the binary.
#
# Usage: hack/helm.sh ARGS...
set -o errexit
set -o nounset
set -o pipefail

HELM_VERSION="v3.22.0"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${HELM:-}" ]]; then
  exec "${HELM}" "$@"
fi
tools="${REPO_ROOT}/bin/tools/helm-${HELM_VERSION}"
if [[ ! -x "${tools}/helm" ]]; then
  echo "building helm ${HELM_VERSION} into ${tools} (once)" >&2
  GOBIN="${tools}" go install "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
fi
exec "${tools}/helm" "$@"
