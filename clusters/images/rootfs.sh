#!/usr/bin/env bash
# Make a Debian root filesystem with debootstrap and write it as a tar archive.
# Usage: rootfs.sh OUT_TAR PACKAGE[,PACKAGE...]
# Downloaded .deb files are kept in KDRILL_CACHE/debs so later rootfs builds reuse them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/versions.env"
out=$1 packages=$2
cache=${KDRILL_CACHE:-$HOME/.cache/kdrill}/debs
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$cache"
root=$(mktemp -d /var/tmp/kdrill-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --cache-dir="$cache" --include="$packages" \
  "$DEBIAN_SUITE" "$root" "$mirror" >"$out.log" 2>&1 || { tail -n 30 "$out.log" >&2; exit 1; }
# What an image never needs: package lists, caches, documentation.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* \
  "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/var/log/*.log
tar --numeric-owner -C "$root" -cf "$out.tmp" . && mv "$out.tmp" "$out"
