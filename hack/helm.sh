#!/usr/bin/env bash
# Runs the pinned Helm (no Debian package ships it), built once into
# bin/tools/ by hack/gotool.sh. $HELM overrides the binary.
#
# Usage: hack/helm.sh ARGS...
exec "$(dirname "${BASH_SOURCE[0]}")/gotool.sh" helm helm.sh/helm/v3/cmd/helm v3.22.0 HELM "$@"
