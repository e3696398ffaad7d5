#!/usr/bin/env bash
# Runs the pinned golangci-lint, built once into bin/tools/ by
# hack/gotool.sh (through the Go module proxy only). $GOLANGCI_LINT
# overrides the binary.
#
# Usage: hack/golangci-lint.sh ARGS...
exec "$(dirname "${BASH_SOURCE[0]}")/gotool.sh" golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint v2.15.0 GOLANGCI_LINT "$@"
