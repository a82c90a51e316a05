#!/usr/bin/env bash
# Installs the Debian packages whose real servers (and the browser) the test suite runs, when missing.
# Without root (or passwordless sudo) it says what is missing; those tests then skip, naming it.
set -u
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-pushgateway >/dev/null 2>&1 || need+=(prometheus-pushgateway)
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v chromium >/dev/null 2>&1 || need+=(chromium)  # the dashboard's browser check
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)  # `docker-compose config` validates docker-compose.yml
[ ${#need[@]} -eq 0 ] && exit 0
pkgs=$(printf '%s\n' "${need[@]}" | sort -u | tr '\n' ' ')
if [ "$(id -u)" -eq 0 ]; then sudo=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"
else
  echo "system-deps: missing $pkgs and no root to install them; the tests that need them will skip" >&2
  exit 0
fi
echo "system-deps: installing $pkgs" >&2
$sudo apt-get update -qq >/dev/null 2>&1
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $pkgs >/dev/null \
  || echo "system-deps: could not install $pkgs; the tests that need them will skip" >&2
exit 0
