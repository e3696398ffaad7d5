#!/usr/bin/env bash
# Runs the pinned controller-gen (deep-copy functions and CRDs), built once
# into bin/tools/ by hack/gotool.sh, outside this module: go.mod and go.sum
# are not touched. $CONTROLLER_GEN overrides the binary.
#
# Usage: hack/controller-gen.sh ARGS...
exec "$(dirname "${BASH_SOURCE[0]}")/gotool.sh" controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen v0.23.0 CONTROLLER_GEN "$@"
