#!/usr/bin/env bash
# Lints the Helm chart in every TLS mode, checks that it renders, and fails
# when the plain manifests in deployments/manifests differ from what
# hack/render-manifests.sh would write. Changes nothing in the tree.
set -o errexit
set -o nounset
set -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${REPO_ROOT}"

CHART="deployments/helm/fpga-dra-driver"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT

hack/helm.sh lint --strict "${CHART}" --kube-version 1.37.0
for values in \
  "--set controller.webhook.tls.mode=certManager" \
  "--set controller.webhook.tls.mode=secret --set controller.webhook.tls.caBundle=Q0E= --set controller.webhook.tls.secretName=tls" \
  "--set kubeletPlugin.simulation.enabled=true --set kubeletPlugin.healthcheckPort=0 --set kubeletPlugin.metricsPort=0 --set controller.replicas=2" \
  "--set kubeletPlugin.mode=dra --set kubeletPlugin.hook.install=false" \
  "--set kubeletPlugin.registry.credentials.secretName=creds --set kubeletPlugin.registry.ca.secretName=ca --set kubeletPlugin.registry.insecureRegistries={registry.local:5000}" \
  "--set kubeletPlugin.registry.ca.configMapName=ca --set kubeletPlugin.bitstreamCache.size=1Gi" \
  "--set kubeletPlugin.xrt.hostRoot=/host --set kubeletPlugin.kernelDriver=auto\,-opae --set kubeletPlugin.simulation.enabled=true --set kubeletPlugin.simulation.cards=0 --set kubeletPlugin.simulation.alveo={u250,u55c}" \
  "--set controller.enabled=false --set priorityClass.create=false --set deviceClass.create=false"; do
  # shellcheck disable=SC2086 # word splitting of the value flags is meant
  hack/helm.sh lint --strict "${CHART}" --kube-version 1.37.0 ${values} >/dev/null
  # shellcheck disable=SC2086
  hack/helm.sh template t "${CHART}" --namespace t --kube-version 1.37.0 ${values} >/dev/null
done

hack/render-manifests.sh "${tmp}"
if ! diff -ru deployments/manifests "${tmp}"; then
  echo "deployments/manifests is stale: run hack/render-manifests.sh (make manifests)" >&2
  exit 1
fi
echo "chart lints and renders; manifests are up to date"
