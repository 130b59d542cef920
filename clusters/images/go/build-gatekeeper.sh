#!/usr/bin/env bash
# Build OPA Gatekeeper's manager from its Go module at the version given (from the Go module
# proxy, as every other Go build here), and keep the manifest that module publishes for
# installing it (manifest_staging/deploy/gatekeeper.yaml) beside the binary.
# Usage: build-gatekeeper.sh OUT_DIR VERSION
set -euo pipefail
module=github.com/open-policy-agent/gatekeeper/v3
version=$2
out=$(mkdir -p "$1" && cd "$1" && pwd)
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
# `go install module@version` builds with the module's own go.sum, outside any module of ours.
GOBIN="$out" go install -trimpath -ldflags "-s -w" "$module@$version"
mv "$out/gatekeeper" "$out/manager"
dir=$(go mod download -json "$module@$version" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
cp "$dir/manifest_staging/deploy/gatekeeper.yaml" "$out/gatekeeper.yaml"
