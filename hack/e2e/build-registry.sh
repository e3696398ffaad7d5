#!/usr/bin/env bash
# Builds the CNCF Distribution registry (github.com/distribution/distribution/v3,
# cmd/registry) from the Go module proxy at a pinned release and caches the
# binary by version outside the repository. The tests of pkg/program/oci and
# the end-to-end suite run this real registry; nothing mocks it.
# A cold build takes a few minutes on 2 cores; later runs only print the path.
#
# Usage: hack/e2e/build-registry.sh        (prints the binary's path last)
# Env:   FPGA_DRA_CACHE (default ~/.cache/fpga-dra-driver)
set -o errexit -o nounset -o pipefail

DISTRIBUTION_VERSION=v3.1.2

CACHE="${FPGA_DRA_CACHE:-${HOME}/.cache/fpga-dra-driver}"
BIN_DIR="${CACHE}/bin/distribution-${DISTRIBUTION_VERSION}"
BIN="${BIN_DIR}/registry"
MOD="${CACHE}/src/distribution-${DISTRIBUTION_VERSION}"
LOG_DIR="${CACHE}/logs"
LOG="${LOG_DIR}/build-registry-${DISTRIBUTION_VERSION}.log"

log() { printf '[build-registry %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [ -x "${BIN}" ]; then
  echo "${BIN}"
  exit 0
fi

mkdir -p "${BIN_DIR}" "${MOD}" "${LOG_DIR}"
# One build at a time: parallel test runs wait for the first one's binary.
exec 9>"${BIN_DIR}/.lock"
flock 9
if [ -x "${BIN}" ]; then
  echo "${BIN}"
  exit 0
fi

start=$(date +%s)
log "building the CNCF Distribution registry ${DISTRIBUTION_VERSION} (once, cached in ${BIN_DIR}; log: ${LOG})"
: > "${LOG}"
if ! {
  # A scratch module, so the registry's dependencies stay out of the
  # driver's go.mod.
  if [ ! -f "${MOD}/go.sum" ]; then
    printf 'module fpga-dra-driver/distribution-build\n\ngo 1.26.0\n' > "${MOD}/go.mod"
    echo 'package main' > "${MOD}/main.go"
    (cd "${MOD}" && go get "github.com/distribution/distribution/v3/cmd/registry@${DISTRIBUTION_VERSION}")
  fi
  (cd "${MOD}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=${DISTRIBUTION_VERSION}" \
    -o "${BIN}.tmp" github.com/distribution/distribution/v3/cmd/registry)
} >>"${LOG}" 2>&1; then
  log "build failed after $(( $(date +%s) - start ))s; the end of ${LOG}:"
  tail -n 30 "${LOG}" >&2
  rm -f "${BIN}.tmp"
  exit 1
fi
mv "${BIN}.tmp" "${BIN}"
log "built in $(( $(date +%s) - start ))s"
echo "${BIN}"
