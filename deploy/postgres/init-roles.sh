#!/bin/sh
# Runs once, when compose.yaml's PostgreSQL initialises its data directory (the image's
# /docker-entrypoint-initdb.d). Like `lockstep up` (lockstep_devstack.postgres.provision): one
# login role per service, lockstep_<service>, owning the schema named after the service and
# allowed to connect to the lockstep database and nothing else. The passwords are read from the
# postgres-roles secret (lines lockstep_<service>:PASSWORD), never from this repository:
# PostgreSQL 16 stores each as a SCRAM-SHA-256 verifier.
#
# Not from the services' pgpass files: those belong to the services' user (uid 10001, mode
# 0600, as libpq demands of a password file), and this script runs as the postgres image's
# user, which may not read them; postgres-roles is that user's own file (docs/operations.md).
set -eu
roles="${LOCKSTEP_POSTGRES_ROLES:-/run/secrets/postgres-roles}"
[ -r "$roles" ] || { echo "init-roles: cannot read $roles (the postgres-roles secret)" >&2; exit 1; }
for service in inventory planner updater healthgate attest; do
  password=$(sed -n "s/^lockstep_${service}://p" "$roles" | head -n 1)
  [ -n "$password" ] || { echo "init-roles: $roles has no line lockstep_${service}:PASSWORD" >&2; exit 1; }
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v role="lockstep_${service}" -v schema="$service" -v password="$password" <<'SQL'
CREATE ROLE :"role" WITH LOGIN NOINHERIT PASSWORD :'password';
GRANT CONNECT ON DATABASE lockstep TO :"role";
CREATE SCHEMA :"schema" AUTHORIZATION :"role";
SQL
done
