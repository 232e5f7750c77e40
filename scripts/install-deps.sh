#!/usr/bin/env bash
# Installs the real servers lockkit's tests run against, from Debian's
# packages, when they are missing: redis-server, redis-sentinel, redis-cli
# (7.x), PostgreSQL 15 and Prometheus (promtool). Safe to run again: it installs only what is absent.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql-15)
# promtool and the Prometheus server, for the alert rules' tests (deploy/).
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "install-deps: not root and no sudo; run as root: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts the packaged services on install where it can; the tests
# start their own servers on free loopback ports and need none of them.
for svc in redis-server redis-sentinel postgresql prometheus prometheus-node-exporter; do
  $sudo systemctl stop "$svc" >/dev/null 2>&1 || true
done
