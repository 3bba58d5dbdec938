#!/usr/bin/env bash
# System packages the test suite uses: a PostgreSQL server (the tests start a private one).
# Installs what is missing through apt-get when run as root; otherwise says what to install.
set -euo pipefail
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v pg_config >/dev/null || missing+=(postgresql)
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "missing system packages: ${missing[*]} (install them to run every test)" >&2
fi
