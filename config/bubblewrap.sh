#!/bin/sh
# Make sure bwrap (Debian's bubblewrap, as Flatpak uses it) is installed: the bundled config runs its
# servers sandboxed, and a sandbox that cannot be made is a start-up error, never an unconfined run.
# Installs it with the system's package manager when it is missing (as root, or through sudo).
set -eu
command -v bwrap >/dev/null 2>&1 && exit 0
if [ "$(id -u)" -eq 0 ]; then as_root=""; else as_root="sudo"; fi
if command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y bubblewrap \
    || { $as_root apt-get update && DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y bubblewrap; }
elif command -v dnf >/dev/null 2>&1; then
  $as_root dnf install -y bubblewrap
elif command -v pacman >/dev/null 2>&1; then
  $as_root pacman -S --noconfirm bubblewrap
elif command -v apk >/dev/null 2>&1; then
  $as_root apk add bubblewrap
else
  echo "config/bubblewrap.sh: install bubblewrap (bwrap) with your system's package manager" >&2
  exit 1
fi
