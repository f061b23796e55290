#!/bin/sh
# Runs once, when compose.yaml's PostgreSQL initialises its data directory (the image's
# /docker-entrypoint-initdb.d). Like `lockstep up` (lockstep_devstack.postgres.provision): one
# login role per service, lockstep_<service>, owning the schema named after the service and
# allowed to connect to the lockstep database and nothing else. Each password is read from the
# service's libpq password file (a compose secret, line host:port:db:role:password), never from
# this repository; PostgreSQL 16 stores it as a SCRAM-SHA-256 verifier.
set -eu
for service in inventory planner updater healthgate attest; do
  file="/run/secrets/${service}-pgpass"
  password=$(head -n 1 "$file" | cut -d: -f5)
  [ -n "$password" ] || { echo "init-roles: $file holds no password" >&2; exit 1; }
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v role="lockstep_${service}" -v schema="$service" -v password="$password" <<'SQL'
CREATE ROLE :"role" WITH LOGIN NOINHERIT PASSWORD :'password';
GRANT CONNECT ON DATABASE lockstep TO :"role";
CREATE SCHEMA :"schema" AUTHORIZATION :"role";
SQL
done
