#!/usr/bin/env bash
# Make containerd state (/var/lib/containerd) in which every given image is already in the
# k8s.io namespace, as the node's CRI plugin expects, and write it as OUT_DIR/containerd.tar.
# A private containerd runs on the host against a scratch root; the images are imported without
# unpacking (the node unpacks on first use, onto its /var volume) and pinned against GC.
# Usage: preload.sh OUT_DIR IMAGE...
set -euo pipefail
out=$1; shift
work=$(mktemp -d /var/tmp/kdrill-preload.XXXXXX)
cleanup() {
  [[ -n "${pid:-}" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/root" "$work/state"
cat >"$work/config.toml" <<TOML
version = 2
root = "$work/root"
state = "$work/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$work/containerd.sock"
TOML
containerd --config "$work/config.toml" >"$work/containerd.log" 2>&1 &
pid=$!
for _ in $(seq 1 50); do
  ctr --address "$work/containerd.sock" version >/dev/null 2>&1 && break
  sleep 0.2
done
ctr_() { ctr --address "$work/containerd.sock" --namespace k8s.io "$@"; }
docker save "$@" | ctr_ images import --no-unpack --all-platforms --digests -
for ref in $(ctr_ images ls -q); do
  ctr_ images label "$ref" io.cri-containerd.pinned=pinned >/dev/null
done
ctr_ images ls
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
# Only the content store and the metadata database belong in the image.
tar --numeric-owner -C "$work/root" -cf "$out/containerd.tar" \
  io.containerd.content.v1.content io.containerd.metadata.v1.bolt
