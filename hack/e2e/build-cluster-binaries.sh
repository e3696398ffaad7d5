#!/usr/bin/env bash
# Builds the binaries of a local Kubernetes node from the Go module proxy at
# pinned versions and caches them by version outside the repository:
#   kube-apiserver, kube-scheduler, kube-controller-manager, kubelet, kubectl
#   (Kubernetes), etcd, containerd + ctr + containerd-shim-runc-v2.
# runc and the CNI plugins come from Debian packages.
# Only what is missing is built; a cold build takes ~12 minutes on 2 cores.
#
# Usage: hack/e2e/build-cluster-binaries.sh            (prints the bin dir last)
# Env:   FPGA_DRA_CACHE (default ~/.cache/fpga-dra-driver)
set -o errexit -o nounset -o pipefail

K8S_VERSION=v1.37.1
STAGING_VERSION=v0.37.1
ETCD_VERSION=v3.7.3
CONTAINERD_VERSION=v2.4.2

CACHE="${FPGA_DRA_CACHE:-${HOME}/.cache/fpga-dra-driver}"
BIN="${CACHE}/bin/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_containerd-${CONTAINERD_VERSION}"
SRC="${CACHE}/src"
mkdir -p "${BIN}" "${SRC}"

log() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Debian packages: runc, CNI plugins, and what the node needs at run time.
need=()
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v openssl >/dev/null || need+=(openssl)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
command -v mount >/dev/null || need+=(mount)
if [ ${#need[@]} -gt 0 ]; then
  log "installing Debian packages: ${need[*]}"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi

# Kubernetes: a scratch module that requires k8s.io/kubernetes and replaces
# every staging module with its published version (kubernetes' own go.mod
# points them at ./staging, which "go install" cannot follow).
k8s_cmds=(kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl)
missing=()
for c in "${k8s_cmds[@]}"; do [ -x "${BIN}/${c}" ] || missing+=("${c}"); done
if [ ${#missing[@]} -gt 0 ]; then
  mod="${SRC}/k8s-${K8S_VERSION}"
  mkdir -p "${mod}"
  if [ ! -f "${mod}/go.sum" ]; then
    log "preparing a module for Kubernetes ${K8S_VERSION}"
    gomod="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    {
      echo "module fpga-dra-driver/k8s-build"
      echo
      echo "go 1.26.0"
      echo
      echo "require k8s.io/kubernetes ${K8S_VERSION}"
      echo
      grep -E '=> \./staging/src/' "${gomod}" | awk -v v="${STAGING_VERSION}" '{print "replace " $1 " => " $1 " " v}'
    } > "${mod}/go.mod"
    echo 'package main' > "${mod}/main.go"
    (cd "${mod}" && for c in "${k8s_cmds[@]}"; do go get "k8s.io/kubernetes/cmd/${c}@${K8S_VERSION}" >&2; done)
  fi
  ver="-X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
  ver="${ver} -X k8s.io/client-go/pkg/version.gitVersion=${K8S_VERSION} -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37"
  for c in "${missing[@]}"; do
    log "building ${c} ${K8S_VERSION} (kube-apiserver alone takes ~8 minutes cold)"
    (cd "${mod}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w ${ver}" -o "${BIN}/${c}.tmp" "k8s.io/kubernetes/cmd/${c}")
    mv "${BIN}/${c}.tmp" "${BIN}/${c}"
  done
fi

if [ ! -x "${BIN}/etcd" ]; then
  mod="${SRC}/etcd-${ETCD_VERSION}"
  mkdir -p "${mod}"
  if [ ! -f "${mod}/go.sum" ]; then
    log "preparing a module for etcd ${ETCD_VERSION}"
    printf 'module fpga-dra-driver/etcd-build\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "${ETCD_VERSION}" > "${mod}/go.mod"
    echo 'package main' > "${mod}/main.go"
    (cd "${mod}" && go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2)
  fi
  log "building etcd ${ETCD_VERSION}"
  (cd "${mod}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${BIN}/etcd.tmp" go.etcd.io/etcd/server/v3)
  mv "${BIN}/etcd.tmp" "${BIN}/etcd"
fi

for c in containerd ctr containerd-shim-runc-v2; do
  if [ ! -x "${BIN}/${c}" ]; then
    log "building ${c} ${CONTAINERD_VERSION}"
    GOBIN="${BIN}" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" -tags no_btrfs,no_devmapper,no_zfs \
      "github.com/containerd/containerd/v2/cmd/${c}@${CONTAINERD_VERSION}"
  fi
done

log "binaries ready"
echo "${BIN}"
