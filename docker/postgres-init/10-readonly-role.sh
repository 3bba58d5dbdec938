#!/bin/bash
# The dashboard's read-only role. The postgres image runs this once, when it initializes an
# empty data directory. Tables come later (farm db upgrade, as POSTGRES_USER), so the role is
# also granted SELECT on every table POSTGRES_USER creates from now on.
set -eo pipefail  # no -u: the image's entrypoint sources scripts that are not executable

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v reader="${FARM_READER_USER:-farm_reader}" \
    -v password="${FARM_READER_PASSWORD:?FARM_READER_PASSWORD is not set}" \
    -v owner="$POSTGRES_USER" -v db="$POSTGRES_DB" <<'SQL'
CREATE ROLE :"reader" LOGIN PASSWORD :'password';
ALTER ROLE :"reader" SET default_transaction_read_only = on;
GRANT CONNECT ON DATABASE :"db" TO :"reader";
GRANT USAGE ON SCHEMA public TO :"reader";
GRANT SELECT ON ALL TABLES IN SCHEMA public TO :"reader";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT SELECT ON TABLES TO :"reader";
SQL
