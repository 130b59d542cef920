#!/usr/bin/env bash
# Build every Go program of the offline images other than Kubernetes itself:
# kind, etcd/etcdctl, CoreDNS, crictl, local-path-provisioner and kdrill's own pause and netd.
# Usage: build-tools.sh OUT_DIR   (reads versions.env)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../versions.env"
out=$(mkdir -p "$1" && cd "$1" && pwd)
export CGO_ENABLED=0
flags=(-trimpath -ldflags "-s -w")

# Modules without replace directives install straight from the proxy at a pinned version.
GOBIN=$out go install "${flags[@]}" sigs.k8s.io/kind@"$KIND_VERSION"
GOBIN=$out go install "${flags[@]}" sigs.k8s.io/cri-tools/cmd/crictl@"$CRICTL_VERSION"
GOBIN=$out go install "${flags[@]}" github.com/rancher/local-path-provisioner@"$LOCAL_PATH_PROVISIONER_VERSION"
# CoreDNS reports its version from a constant; no stamping needed.
GOBIN=$out go install "${flags[@]}" github.com/coredns/coredns@"$COREDNS_VERSION"

# etcd's modules only build together through a wrapper (see etcd/go.mod).
(cd "$here/etcd" && GOFLAGS=-mod=readonly go build "${flags[@]}" -o "$out/" \
  go.etcd.io/etcd/server/v3 go.etcd.io/etcd/etcdctl/v3)
# go names the etcd server binary after its module directory, "server".
mv "$out/server" "$out/etcd"

(cd "$here/../src" && go build "${flags[@]}" -o "$out/" ./pause ./netd)
