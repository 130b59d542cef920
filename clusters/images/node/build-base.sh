#!/usr/bin/env bash
# Turn the debootstrapped node root filesystem into kdrill's node base image: our entrypoint and
# configuration, crictl, the CNI plugins where containerd looks for them, and systemd trimmed to
# what a node container runs.
# Usage: build-base.sh ROOTFS_TAR CRICTL IMAGE_TAG LABEL
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rootfs_tar=$1 crictl=$2 tag=$3 label=$4
root=$(mktemp -d /var/tmp/kdrill-node-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
tar --numeric-owner -C "$root" -xf "$rootfs_tar"
cp -a "$here/files/." "$root/"
install -m 0755 "$crictl" "$root/usr/local/bin/crictl"

# Debian installs the CNI plugins in /usr/lib/cni; containerd is told /opt/cni/bin.
mkdir -p "$root/opt/cni/bin" "$root/etc/cni/net.d"
for plugin in "$root"/usr/lib/cni/*; do
  ln -sf "/usr/lib/cni/$(basename "$plugin")" "$root/opt/cni/bin/$(basename "$plugin")"
done
mkdir -p "$root/etc/kubernetes/manifests" "$root/kind" "$root/var/lib/kubelet"

# systemd: start kubelet with containerd; nothing that needs real hardware, a tty or a timer.
ln -sf /etc/systemd/system/kubelet.service "$root/etc/systemd/system/multi-user.target.wants/kubelet.service"
for unit in getty@tty1.service console-getty.service systemd-binfmt.service e2scrub_reap.service \
  e2scrub_all.timer fstrim.timer apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
  systemd-pstore.service remote-fs.target systemd-logind.service getty.target; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
mkdir -p "$root/etc/systemd/journald.conf.d"
printf '[Journal]\n# The kernel ring buffer is the host'"'"'s, not the node'"'"'s.\nReadKMsg=no\n' \
  >"$root/etc/systemd/journald.conf.d/10-kdrill.conf"
# A fresh machine-id is written by the entrypoint at each start.
: >"$root/etc/machine-id"

tar --numeric-owner -C "$root" -c . | docker import \
  --change "LABEL $label" \
  --change 'ENV container=docker' \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
  - "$tag"
