#!/usr/bin/env bash
# Builds the DRA drivers `make bench-e2e` compares ours with, and caches them
# by version outside the repository:
#   dra-test-driver            k8s.io/kubernetes/test/e2e/dra/test-driver, from
#                              a copy of the scratch module of
#                              build-cluster-binaries.sh (run that first);
#   dra-example-kubeletplugin  sigs.k8s.io/dra-example-driver's kubelet plugin,
#                              from a scratch module requiring its release.
# Only what is missing is built. Prints the directory holding both last.
#
# Usage: hack/e2e/build-bench-drivers.sh
# Env:   FPGA_DRA_CACHE (default ~/.cache/fpga-dra-driver)
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=buildlib.sh
. "${REPO_ROOT}/hack/e2e/buildlib.sh"

K8S_VERSION="$(sed -n 's/^K8S_VERSION=//p' "${REPO_ROOT}/hack/e2e/build-cluster-binaries.sh")"
EXAMPLE_VERSION=v0.4.0

BIN="${CACHE}/bin/bench-drivers_k8s-${K8S_VERSION}_example-${EXAMPLE_VERSION}"
SRC="${CACHE}/src"
mkdir -p "${BIN}" "${SRC}"

# A copy of build-cluster-binaries.sh's scratch module (run that first: it
# writes it), so that adding the test driver's packages leaves that one as
# it is.
k8s_mod="${SRC}/k8s-${K8S_VERSION}"
test_mod="${SRC}/k8s-${K8S_VERSION}-test-driver"
test_driver_build() {
  if [ ! -f "${k8s_mod}/go.sum" ]; then
    echo "no scratch module ${k8s_mod}: run hack/e2e/build-cluster-binaries.sh first" >&2
    return 1
  fi
  mkdir -p "${test_mod}"
  cp "${k8s_mod}/go.mod" "${k8s_mod}/go.sum" "${k8s_mod}/main.go" "${test_mod}/"
  (cd "${test_mod}" && go get "k8s.io/kubernetes/test/e2e/dra/test-driver@${K8S_VERSION}" &&
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${BIN}/dra-test-driver.tmp" k8s.io/kubernetes/test/e2e/dra/test-driver)
  mv "${BIN}/dra-test-driver.tmp" "${BIN}/dra-test-driver"
}
if [ ! -x "${BIN}/dra-test-driver" ]; then
  step "building the DRA test driver ${K8S_VERSION}" test_driver_build
fi

# The proxy refuses the module's version list, so "go install ...@version"
# (which reads it for deprecations) fails; a scratch module does not read it.
example_mod="${SRC}/dra-example-driver-${EXAMPLE_VERSION}"
example_build() {
  if [ ! -f "${example_mod}/go.sum" ]; then
    mkdir -p "${example_mod}"
    printf 'module fpga-dra-driver/example-build\n\ngo 1.26.0\n\nrequire sigs.k8s.io/dra-example-driver %s\n' "${EXAMPLE_VERSION}" >"${example_mod}/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin"\n' >"${example_mod}/tools.go"
    (cd "${example_mod}" && go mod tidy)
  fi
  (cd "${example_mod}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${BIN}/dra-example-kubeletplugin.tmp" sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin)
  mv "${BIN}/dra-example-kubeletplugin.tmp" "${BIN}/dra-example-kubeletplugin"
}
if [ ! -x "${BIN}/dra-example-kubeletplugin" ]; then
  step "building dra-example-driver ${EXAMPLE_VERSION} (~3 minutes cold on 2 cores)" example_build
fi

echo "${BIN}"
