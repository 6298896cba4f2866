#!/usr/bin/env bash
# Validates berth's Kubernetes manifests offline: renders each overlay with
# kustomize and checks every resource with kubeconform (pinned, installed
# through the Go module proxy) against strict schemas generated from the
# Kubernetes API's Go types (deploy/k8s/schemas, by deploy/k8s/schemagen).
# CI cannot download kubeconform's default schemas, hence the local ones.
set -euo pipefail
cd "$(dirname "$0")/.."
KUBECONFORM_VERSION=v0.7.0
KUSTOMIZE_VERSION=v5.5.0
bin=$PWD/.bin
mkdir -p "$bin"
kubeconform=$bin/kubeconform-$KUBECONFORM_VERSION
if [ ! -x "$kubeconform" ]; then
  GOBIN=$bin go install "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
  mv "$bin/kubeconform" "$kubeconform"
fi
kustomize() {
  if command -v kubectl >/dev/null 2>&1; then
    kubectl kustomize "$1"
  else
    if [ ! -x "$bin/kustomize-$KUSTOMIZE_VERSION" ]; then
      GOBIN=$bin go install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"
      mv "$bin/kustomize" "$bin/kustomize-$KUSTOMIZE_VERSION"
    fi
    "$bin/kustomize-$KUSTOMIZE_VERSION" build "$1"
  fi
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for overlay in deploy/k8s/overlays/*/; do
  name=$(basename "$overlay")
  kustomize "$overlay" > "$out/$name.yaml"
done
"$kubeconform" -strict -summary \
  -schema-location "$PWD/deploy/k8s/schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
  "$out"/*.yaml deploy/k8s/base/secret.example.yaml
# Alert rules with Prometheus's rule parser (as promtool check rules), and
# the dashboard's PromQL; deploy/monitoring/rulecheck pins the version.
(cd deploy/monitoring/rulecheck && go run . --dashboard ../dashboard.json ../alerts.yaml)
