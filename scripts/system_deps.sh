#!/usr/bin/env bash
# System packages the test suite uses: a PostgreSQL server (the tests start a private one),
# Debian's ROCm hipRTC (the AMD compile path, .ci/hiprtc.sh) and Chromium (the dashboard's
# browser test). Installs what is missing through apt-get when run as root; otherwise says what
# to install.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v pg_config >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "missing system package: postgresql (install it to run the PostgreSQL tests)" >&2
  fi
fi
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "missing system package: chromium (install it to run the dashboard browser test)" >&2
  fi
fi
bash "$here/../.ci/hiprtc.sh" >/dev/null
