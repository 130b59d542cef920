#!/usr/bin/env bash
# Build one extra Kubernetes release for upgrade rehearsals: its commands (by build-kubernetes.sh,
# given the release's versions.env and wrapper module in place of the default ones), and the etcd
# and CoreDNS its kubeadm deploys.
# Usage: build-release.sh OUT_DIR RELEASE_DIR   (RELEASE_DIR: clusters/images/releases/vX.Y.Z,
# holding versions.env and the wrapper modules kubernetes/ and etcd/)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
release=$(cd "$2" && pwd)
source "$release/versions.env"
# build-kubernetes.sh reads ../versions.env and ./kubernetes beside itself: lay the release's out so.
tree=$(mktemp -d /var/tmp/kdrill-release.XXXXXX)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/go"
cp "$here/build-kubernetes.sh" "$tree/go/"
cp "$release/versions.env" "$tree/versions.env"
cp -r "$release/kubernetes" "$tree/go/kubernetes"
bash "$tree/go/build-kubernetes.sh" "$out"
export CGO_ENABLED=0
(cd "$release/etcd" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$out/" \
  go.etcd.io/etcd/server/v3 go.etcd.io/etcd/etcdctl/v3)
mv "$out/server" "$out/etcd"
GOBIN=$out go install -trimpath -ldflags "-s -w" github.com/coredns/coredns@"$COREDNS_VERSION"
