#!/usr/bin/env bash
# Runs the pinned staticcheck (v0.8.2 is release 2026.2.2), built once into
# bin/tools/ by hack/gotool.sh. $STATICCHECK overrides the binary.
#
# Usage: hack/staticcheck.sh ARGS...
exec "$(dirname "${BASH_SOURCE[0]}")/gotool.sh" staticcheck honnef.co/go/tools/cmd/staticcheck v0.8.2 STATICCHECK "$@"
