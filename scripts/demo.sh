#!/usr/bin/env bash
# The farm on this machine with the embedded default database: queue the example sweeps and
# show the queue. Uses FARM_DB_URL when set, else a SQLite file in the user's data directory.
set -euo pipefail
cd "$(dirname "$0")/.."
farm=.venv/bin/farm
$farm db upgrade
for spec in jobs/examples/*.yaml; do
  $farm submit "$spec" >/dev/null
done
$farm status
