#!/usr/bin/env bash
# Installs Debian 11's newest 5.10 kernel image (bullseye-security) for the 5.10 VM row, through an
# apt configuration of its own: the machine's apt sources and lists are left as they are, and only
# this one package comes from bullseye. Its dependencies (kmod, linux-base, initramfs-tools) are
# Debian 12's own. Idempotent: nothing is fetched when a 5.10 image is in /boot already.
set -euo pipefail
if compgen -G "/boot/vmlinuz-5.10.*-amd64" >/dev/null; then
  exit 0
fi
dir=$(mktemp -d /var/tmp/fsprof-bullseye.XXXXXX)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bullseye-security main" \
  > "$dir/sources.list"
opts=(-o "Dir::Etc::sourcelist=$dir/sources.list" -o Dir::Etc::sourceparts=/dev/null
      -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache" -o APT::Sandbox::User=root)
apt-get "${opts[@]}" update -qq
pkg=$(apt-cache "${opts[@]}" search --names-only '^linux-image-5\.10\.0-[0-9]+-amd64$' | awk '{print $1}' | sort -V | tail -1)
if [ -z "$pkg" ]; then
  echo "no linux-image-5.10.0-*-amd64 package in Debian's bullseye-security" >&2
  exit 1
fi
echo "installing $pkg from bullseye-security"
(cd "$dir" && apt-get "${opts[@]}" download "$pkg" >/dev/null)
DEBIAN_FRONTEND=noninteractive dpkg -i "$dir"/"$pkg"_*.deb >/dev/null
