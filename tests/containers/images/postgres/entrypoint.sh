#!/bin/sh
# What the official postgres image's docker-entrypoint.sh does for compose.yaml, no more.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp)
  cat "$POSTGRES_PASSWORD_FILE" > "$pwfile"
  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of options
  initdb --username="$POSTGRES_USER" --pwfile="$pwfile" ${POSTGRES_INITDB_ARGS:-}
  rm -f "$pwfile"
  printf "host all all all scram-sha-256\n" >> "$PGDATA/pg_hba.conf"
  PGPASSWORD=$(cat "$POSTGRES_PASSWORD_FILE")  # the scripts below log in as the superuser
  export PGPASSWORD
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
    -c "CREATE DATABASE \"$POSTGRES_DB\""
  for script in /docker-entrypoint-initdb.d/*.sh; do
    [ -e "$script" ] || continue
    echo "entrypoint: running $script"
    POSTGRES_USER="$POSTGRES_USER" POSTGRES_DB="$POSTGRES_DB" sh "$script"
  done
  pg_ctl -D "$PGDATA" -m fast -w stop
  unset PGPASSWORD
fi
exec postgres -c listen_addresses='*'
