#!/usr/bin/env bash
# Build the monitoring stack of the observability profile from the Go module proxy, as every other
# Go build here: Prometheus, Alertmanager and kube-state-metrics, each with its module's own go.sum.
# Usage: build-observability.sh OUT_DIR PROMETHEUS_VERSION ALERTMANAGER_VERSION KUBE_STATE_METRICS_VERSION
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOWORK=off
flags=(-trimpath -ldflags "-s -w")

# Kubernetes service discovery only: the cloud providers' discovery plugins are most of the build.
GOBIN="$out" go install "${flags[@]}" -tags remove_all_sd,enable_kubernetes_sd \
  "github.com/prometheus/prometheus/cmd/prometheus@$2"
GOBIN="$out" go install "${flags[@]}" "k8s.io/kube-state-metrics/v2@$4"

# Alertmanager embeds its web UI from ui/app/dist, which its module does not carry (the UI is
# built with npm at release). The API is all a drill reads, so build from a copy of the module
# with a one-page stand-in for that directory.
module=github.com/prometheus/alertmanager
dir=$(go mod download -json "$module@$3" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
src=$(mktemp -d)
trap 'chmod -R u+w "$src"; rm -rf "$src"' EXIT
cp -r "$dir/." "$src/"
chmod -R u+w "$src"
for ui in elm mantine; do
  mkdir -p "$src/ui/app/dist/$ui"
  echo "<html><body>Alertmanager $3, built offline without its web UI: use the API (/api/v2).</body></html>" \
    > "$src/ui/app/dist/$ui/index.html"
done
(cd "$src" && go build "${flags[@]}" -mod=readonly -o "$out/alertmanager" ./cmd/alertmanager)
ls -l "$out"
