#!/usr/bin/env bash
# Install MariaDB (Debian 12's 10.11) into a project-local folder, .services/mariadb,
# without changing the system: `apt-get download` the server and the libraries
# it needs, then `dpkg -x` them. Tests start `mariadbd` from there on a free
# port with a temporary data directory (tests/services/mariadb.py).
# Idempotent; needs apt-get with Debian 12's package lists (run as root or with sudo).
set -euo pipefail
cd "$(dirname "$0")/../.."

DEST=.services/mariadb
PACKAGES=(mariadb-server-core mariadb-client-core mariadb-common libaio1 liburing2)
log() { printf '[mariadb] %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if [ -x "$DEST/root/usr/sbin/mariadbd" ] && [ -f "$DEST/.installed" ]; then
  log "already installed in $DEST"
  exit 0
fi

mkdir -p "$DEST/debs" "$DEST/root"
if ! apt-cache show mariadb-server-core >/dev/null 2>&1; then
  as_root apt-get update -qq
fi
log "downloading ${PACKAGES[*]}"
# apt-get download writes to the working directory; the _apt sandbox user
# may not be able to write there, so fetch as the invoking user.
(cd "$DEST/debs" && apt-get download -qq "${PACKAGES[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
for deb in "$DEST"/debs/*.deb; do
  dpkg -x "$deb" "$DEST/root"
done
if [ ! -x "$DEST/root/usr/sbin/mariadbd" ]; then
  log "mariadbd missing after unpacking; is this Debian 12 with its main repository?"
  exit 1
fi
missing=$(LD_LIBRARY_PATH="$PWD/$DEST/root/usr/lib/x86_64-linux-gnu" ldd "$DEST/root/usr/sbin/mariadbd" | grep 'not found' || true)
if [ -n "$missing" ]; then
  log "mariadbd lacks libraries: $missing"
  exit 1
fi
touch "$DEST/.installed"
log "installed $(LD_LIBRARY_PATH="$PWD/$DEST/root/usr/lib/x86_64-linux-gnu" "$DEST/root/usr/sbin/mariadbd" --version 2>/dev/null || echo mariadbd) in $DEST"
