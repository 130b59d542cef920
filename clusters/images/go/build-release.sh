#!/usr/bin/env bash
# Build one extra Kubernetes release for upgrade rehearsals: its commands (stamped with their real
# version, which kubeadm compares), and the etcd and CoreDNS its kubeadm deploys.
# Usage: build-release.sh OUT_DIR RELEASE_DIR   (RELEASE_DIR: clusters/images/releases/vX.Y.Z,
# holding versions.env and the wrapper modules kubernetes/ and etcd/)
set -euo pipefail
out=$(mkdir -p "$1" && cd "$1" && pwd)
release=$(cd "$2" && pwd)
source "$release/versions.env"
v=${KUBERNETES_VERSION}
minor=$(echo "$v" | cut -d. -f2)
export CGO_ENABLED=0
commit=$(cd "$release/kubernetes" && go list -m -json k8s.io/kubernetes@"$v" 2>/dev/null \
  | sed -n 's/.*"Hash": "\(.*\)".*/\1/p' || true)
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  stamp+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  stamp+=" -X $pkg.gitCommit=${commit:-0000000000000000000000000000000000000000}"
done
(cd "$release/kubernetes" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w $stamp" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubectl)
(cd "$release/etcd" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$out/" \
  go.etcd.io/etcd/server/v3 go.etcd.io/etcd/etcdctl/v3)
mv "$out/server" "$out/etcd"
GOBIN=$out go install -trimpath -ldflags "-s -w" github.com/coredns/coredns@"$COREDNS_VERSION"
