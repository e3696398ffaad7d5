#!/usr/bin/env bash
# Runs a pinned Go tool with the given arguments, building it with
# "go install" into bin/tools/ on first use (the Go module proxy is
# reachable where release downloads and Debian packages of these tools are
# not). The environment variable named by OVERRIDE, when set, names a
# binary to run instead.
#
# Usage: hack/gotool.sh NAME PACKAGE VERSION OVERRIDE ARGS...
set -o errexit
set -o nounset
set -o pipefail

name="$1" pkg="$2" version="$3" override="$4"
shift 4
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${!override:-}" ]]; then
  exec "${!override}" "$@"
fi
tools="${REPO_ROOT}/bin/tools/${name}-${version}"
if [[ ! -x "${tools}/${name}" ]]; then
  echo "building ${name} ${version} into ${tools} (once)" >&2
  GOBIN="${tools}" go install "${pkg}@${version}"
fi
exec "${tools}/${name}" "$@"
