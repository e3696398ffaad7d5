#!/usr/bin/env bash
# Builds what the autoscaling end-to-end tests (test/e2e/autoscale) run
# beside the local cluster, from the Go module proxy at pinned versions:
#   karpenter   Karpenter core with its kwok cloud provider, whose instance
#               types gain FPGA devices (test/e2e/autoscale/provider, a module
#               of its own that pins sigs.k8s.io/karpenter). Karpenter needs
#               Go 1.26.9 or newer: it is built with GOTOOLCHAIN=go1.27.3
#               (the provider's go.mod names it), which the go command
#               fetches through the module proxy; the
#               project itself stays on the machine's Go. Rebuilt on every
#               run (the provider imports the project's packages); Go's build
#               cache makes an unchanged rebuild a matter of seconds.
#   kwok        the kwok controller (fake kubelets for the nodes Karpenter
#               launches), cached by version.
#   crds/       Karpenter's CRDs (NodePool, NodeClaim, NodeOverlay,
#               KWOKNodeClass) from the pinned module.
#   kwok.yaml   kwok's configuration with its "fast" node and pod stages and
#               lease heartbeats, from the pinned module.
# Each step says what it builds and how long it took; the tools' output goes
# to the build log (see buildlib.sh).
#
# Usage: hack/e2e/build-autoscaler-binaries.sh           (prints the bin dir last)
# Env:   FPGA_DRA_CACHE (default ~/.cache/fpga-dra-driver)
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=buildlib.sh
. "${REPO_ROOT}/hack/e2e/buildlib.sh"

KWOK_VERSION=v0.8.0
PROVIDER="${REPO_ROOT}/test/e2e/autoscale/provider"
# The provider's go.mod names the toolchain (go1.27.3).
KARPENTER_GO="$(sed -n 's/^toolchain //p' "${PROVIDER}/go.mod")"

# The provider's go.mod pins Karpenter.
karpenter() { (cd "${PROVIDER}" && GOTOOLCHAIN="${KARPENTER_GO}" go "$@"); }
step "fetching the ${KARPENTER_GO} toolchain and Karpenter's module" karpenter mod download sigs.k8s.io/karpenter
KARPENTER_VERSION="$(karpenter list -m -f '{{.Version}}' sigs.k8s.io/karpenter)"
KARPENTER_DIR="$(karpenter list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"

BIN="${CACHE}/bin/karpenter-${KARPENTER_VERSION}_kwok-${KWOK_VERSION}"
mkdir -p "${BIN}/crds"
begin=${SECONDS}

hint=""
[ -x "${BIN}/karpenter" ] || hint=" (~8 minutes cold on 2 cores: a new toolchain compiles everything)"
# -mod=mod: the provider requires the project's module through a replace
# directive, so the project's go.mod decides part of its module graph; when
# that moved on, the go command updates the provider's go.mod and go.sum
# instead of refusing to build.
karpenter_build() {
  karpenter build -mod=mod -trimpath -o "${BIN}/karpenter" .
}
step "building Karpenter ${KARPENTER_VERSION} with the FPGA kwok provider${hint}" karpenter_build
if ! git -C "${REPO_ROOT}" diff --quiet -- "${PROVIDER}/go.mod" "${PROVIDER}/go.sum" 2>/dev/null; then
  say "note: ${PROVIDER#"${REPO_ROOT}"/}/go.mod and go.sum were updated to follow the project's go.mod; commit them"
fi

kwok_build() {
  GOBIN="${BIN}" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
}
if [ ! -x "${BIN}/kwok" ]; then
  step "building the kwok controller ${KWOK_VERSION} (~4 minutes cold)" kwok_build
fi

# Karpenter's CRDs and kwok's stages, from the pinned modules.
assets() {
  cp "${KARPENTER_DIR}"/kwok/charts/crds/karpenter.sh_*.yaml "${KARPENTER_DIR}"/kwok/apis/crds/*.yaml "${BIN}/crds/"
  chmod u+w "${BIN}"/crds/*.yaml
  local kwok_dir stage
  kwok_dir="$(go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  {
    # kwok's own configuration (it manages the nodes annotated
    # kwok.x-k8s.io/node=fake, as the kwok provider's nodes are), with the
    # stages below instead of Stage objects.
    sed '/^  enableCRDs:/,$d' "${kwok_dir}/kustomize/kwok/kwok.yaml"
    for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
      printf -- '---\n'
      cat "${kwok_dir}/kustomize/stage/${stage}.yaml"
    done
  } >"${BIN}/kwok.yaml.tmp"
  mv "${BIN}/kwok.yaml.tmp" "${BIN}/kwok.yaml"
}
step "copying Karpenter's CRDs and kwok's stages" assets

say "autoscaler binaries ready in $(duration $((SECONDS - begin))) (tool output in ${BUILD_LOG})"
echo "${BIN}"
