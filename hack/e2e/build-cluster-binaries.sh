#!/usr/bin/env bash
# Builds the binaries of a local Kubernetes node from the Go module proxy at
# pinned versions and caches them by version outside the repository:
#   kube-apiserver, kube-scheduler, kube-controller-manager, kubelet, kubectl
#   (Kubernetes), etcd, containerd + ctr + containerd-shim-runc-v2,
# and Helm (for the chart) into bin/tools. runc and the CNI plugins come
# from Debian packages. Only what is missing is built. Each step says what
# it builds and how long it took; the tools' output goes to the build log
# (see buildlib.sh).
#
# Usage: hack/e2e/build-cluster-binaries.sh            (prints the bin dir last)
# Env:   FPGA_DRA_CACHE (default ~/.cache/fpga-dra-driver)
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=buildlib.sh
. "${REPO_ROOT}/hack/e2e/buildlib.sh"

K8S_VERSION=v1.37.1
STAGING_VERSION=v0.37.1
ETCD_VERSION=v3.7.3
CONTAINERD_VERSION=v2.4.2

BIN="${CACHE}/bin/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_containerd-${CONTAINERD_VERSION}"
SRC="${CACHE}/src"
mkdir -p "${BIN}" "${SRC}"
begin=${SECONDS}
built=()

# Debian packages: runc, CNI plugins, and what the node needs at run time.
need=()
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v openssl >/dev/null || need+=(openssl)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
command -v mount >/dev/null || need+=(mount)
if [ ${#need[@]} -gt 0 ]; then
  step "installing Debian packages: ${need[*]}" apt_install "${need[@]}"
fi

# Kubernetes: a scratch module that requires k8s.io/kubernetes and replaces
# every staging module with its published version (kubernetes' own go.mod
# points them at ./staging, which "go install" cannot follow).
k8s_cmds=(kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl)
k8s_mod="${SRC}/k8s-${K8S_VERSION}"
k8s_module() {
  mkdir -p "${k8s_mod}"
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  {
    echo "module fpga-dra-driver/k8s-build"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes ${K8S_VERSION}"
    echo
    grep -E '=> \./staging/src/' "${gomod}" | awk -v v="${STAGING_VERSION}" '{print "replace " $1 " => " $1 " " v}'
  } >"${k8s_mod}/go.mod"
  echo 'package main' >"${k8s_mod}/main.go"
  local c
  for c in "${k8s_cmds[@]}"; do (cd "${k8s_mod}" && go get "k8s.io/kubernetes/cmd/${c}@${K8S_VERSION}"); done
}
k8s_build() {
  local ver="-X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
  ver="${ver} -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION} -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37"
  (cd "${k8s_mod}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w ${ver}" -o "${BIN}/$1.tmp" "k8s.io/kubernetes/cmd/$1")
  mv "${BIN}/$1.tmp" "${BIN}/$1"
}
missing=()
for c in "${k8s_cmds[@]}"; do [ -x "${BIN}/${c}" ] || missing+=("${c}"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ ! -f "${k8s_mod}/go.sum" ]; then
    step "downloading the Kubernetes ${K8S_VERSION} sources (~1 GB module cache)" k8s_module
  fi
  for c in "${missing[@]}"; do
    # The first binary compiles most of what the others share.
    hint=""
    [ "${c}" = "${missing[0]}" ] && hint=" (the first Kubernetes binary compiles the shared code: ~8 minutes cold on 2 idle cores)"
    step "building ${c} ${K8S_VERSION}${hint}" k8s_build "${c}"
    built+=("${c}")
  done
fi

etcd_mod="${SRC}/etcd-${ETCD_VERSION}"
etcd_build() {
  if [ ! -f "${etcd_mod}/go.sum" ]; then
    mkdir -p "${etcd_mod}"
    printf 'module fpga-dra-driver/etcd-build\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "${ETCD_VERSION}" >"${etcd_mod}/go.mod"
    echo 'package main' >"${etcd_mod}/main.go"
    (cd "${etcd_mod}" && go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}")
  fi
  (cd "${etcd_mod}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${BIN}/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "${BIN}/etcd.tmp" "${BIN}/etcd"
}
if [ ! -x "${BIN}/etcd" ]; then
  step "building etcd ${ETCD_VERSION}" etcd_build
  built+=(etcd)
fi

containerd_build() {
  GOBIN="${BIN}" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" -tags no_btrfs,no_devmapper,no_zfs \
    "github.com/containerd/containerd/v2/cmd/$1@${CONTAINERD_VERSION}"
}
for c in containerd ctr containerd-shim-runc-v2; do
  if [ ! -x "${BIN}/${c}" ]; then
    step "building ${c} ${CONTAINERD_VERSION}" containerd_build "${c}"
    built+=("${c}")
  fi
done

# Helm renders the chart the demo and the e2e suite install; hack/helm.sh
# pins it and builds it into bin/tools on first use.
HELM_VERSION="$(sed -n 's|.*helm\.sh/helm/v3/cmd/helm \(v[0-9.]*\).*|\1|p' "${REPO_ROOT}/hack/helm.sh")"
if [ -z "${HELM_VERSION}" ] || [ ! -x "${REPO_ROOT}/bin/tools/helm-${HELM_VERSION}/helm" ]; then
  step "building helm ${HELM_VERSION} (for the chart)" "${REPO_ROOT}/hack/helm.sh" version --short
  built+=(helm)
fi

if [ ${#built[@]} -gt 0 ]; then
  say "cluster binaries ready in $(duration $((SECONDS - begin))) (built ${built[*]}; tool output in ${BUILD_LOG})"
else
  say "cluster binaries ready (cached in ${BIN})"
fi
echo "${BIN}"
