#!/usr/bin/env bash
# The farm on this machine with the embedded default database: the standard sweep end to end
# (local Ray, NVRTC compiles, this machine's GPUs or the replay device), then a summary.
# Uses FARM_DB_URL when set, else a SQLite file in the user's data directory.
set -euo pipefail
cd "$(dirname "$0")/.."
farm=.venv/bin/farm
$farm db upgrade
$farm demo "$@"
