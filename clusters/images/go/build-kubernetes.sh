#!/usr/bin/env bash
# Build the Kubernetes commands a kind node needs, with real version stamping.
# Usage: build-kubernetes.sh OUT_DIR   (reads versions.env)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../versions.env"
out=$1; mkdir -p "$out"
v=${KUBERNETES_VERSION}
minor=$(echo "$v" | cut -d. -f2)
commit=$(go list -m -json k8s.io/kubernetes@"$v" -modfile "$here/kubernetes/go.mod" 2>/dev/null | sed -n 's/.*"Hash": "\(.*\)".*/\1/p' || true)
stamp=""
# kubeadm and the API server compare these versions; both version packages must carry them.
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  stamp+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  stamp+=" -X $pkg.gitCommit=${commit:-0000000000000000000000000000000000000000}"
done
cd "$here/kubernetes"
# One invocation, so that shared packages compile once.
CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w $stamp" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubectl
