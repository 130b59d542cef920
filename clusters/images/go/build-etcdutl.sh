#!/usr/bin/env bash
# Build etcdutl at the etcd version of the images (go/etcdutl/go.mod pins it).
# Usage: build-etcdutl.sh OUT_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
export CGO_ENABLED=0
(cd "$here/etcdutl" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$out/" go.etcd.io/etcd/etcdutl/v3)
