#!/usr/bin/env bash
# Install Debian's Chromium for the inspector's browser tests (tests/e2e/test_inspector_browser.py),
# which drive it with Playwright for Python through its executable (/usr/bin/chromium): Playwright's
# own browser download is not needed, and is not reachable from every build machine.
# Alerts are in Chinese as well as English: a small CJK font (fonts-wqy-microhei, 1.6 MB) lets the
# pages' screenshots show them. Idempotent; needs apt-get (run as root or with sudo).
set -euo pipefail

log() { printf '[chromium] %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

PACKAGES=(chromium fonts-wqy-microhei)
if [ -x /usr/bin/chromium ] && dpkg -s fonts-wqy-microhei >/dev/null 2>&1; then
  log "already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
  exit 0
fi
if ! apt-cache show chromium fonts-wqy-microhei >/dev/null 2>&1; then
  as_root apt-get update -qq
fi
log "installing Debian's ${PACKAGES[*]}"
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${PACKAGES[@]}" >/dev/null
log "installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
