#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback, for the results-store tests.
#
# Installs PostgreSQL from the Debian packages when no server binaries are found, initializes a
# data directory under /tmp (as a non-root user: initdb refuses root), starts the server on
# 127.0.0.1 only (port 5432, or the next free one), trusts loopback connections, and creates
# the role and database the tests use. Idempotent: a server this script started is reused.
#
# stdout is one line, for eval:   export BADPUT_TEST_PG_URL=postgresql://badput@127.0.0.1:PORT/badput_test
# Everything else goes to stderr.
#
# Settings (environment): BADPUT_PG_ROOT (default /tmp/badput-pg), BADPUT_PG_PORT (first port
# to try, default 5432), BADPUT_PG_INSTALL (auto: install only when missing; always; never).
set -euo pipefail

ROOT=${BADPUT_PG_ROOT:-/tmp/badput-pg}
DATA=$ROOT/data
FIRST_PORT=${BADPUT_PG_PORT:-5432}
INSTALL=${BADPUT_PG_INSTALL:-auto}
ROLE=badput
DB=badput_test

log() { echo "postgres.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# ---- binaries -------------------------------------------------------------------------------

# The newest server bin directory: Debian's /usr/lib/postgresql/*/bin, else initdb on PATH.
find_bindir() {
    local d best="" best_v=0 v
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ] || continue
        v=$(basename "$(dirname "$d")")
        v=${v%%.*}
        if [[ $v =~ ^[0-9]+$ ]] && ((v > best_v)); then
            best=$d
            best_v=$v
        fi
    done
    if [ -z "$best" ] && command -v initdb >/dev/null 2>&1; then
        best=$(dirname "$(readlink -f "$(command -v initdb)")")
        [ -x "$best/pg_ctl" ] && [ -x "$best/postgres" ] || best=""
    fi
    [ -n "$best" ] && echo "$best"
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        die "not root and no sudo: cannot run $*"
    fi
}

install_postgres() {
    command -v apt-get >/dev/null 2>&1 || die "no PostgreSQL server binaries and no apt-get"
    log "installing PostgreSQL from the Debian packages"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends postgresql >&2
}

BINDIR=""
case "$INSTALL" in
    always) install_postgres ;;
    auto | never) ;;
    *) die "BADPUT_PG_INSTALL must be auto, always or never" ;;
esac
BINDIR=$(find_bindir) || true
if [ -z "$BINDIR" ]; then
    [ "$INSTALL" = never ] && die "no PostgreSQL server binaries found"
    install_postgres
    BINDIR=$(find_bindir) || die "installed postgresql, but found no server binaries"
fi
for tool in initdb pg_ctl pg_isready psql; do
    [ -x "$BINDIR/$tool" ] || die "$BINDIR/$tool is missing"
done
log "server binaries: $BINDIR ($("$BINDIR/postgres" --version))"

# ---- the user the server runs as ------------------------------------------------------------

if [ "$(id -u)" -eq 0 ]; then
    RUN_USER=postgres
    if ! id -u "$RUN_USER" >/dev/null 2>&1; then
        log "creating system user $RUN_USER"
        useradd --system --home-dir "$ROOT" --shell /usr/sbin/nologin "$RUN_USER" \
            || die "cannot create user $RUN_USER"
    fi
else
    RUN_USER=$(id -un)
fi

# Run a command as RUN_USER (arguments are passed as they are, no shell re-parsing).
as_pg() {
    if [ "$(id -un)" = "$RUN_USER" ]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u "$RUN_USER" -- "$@"
    else
        su "$RUN_USER" -s /bin/sh -c '"$0" "$@"' -- "$@"
    fi
}

mkdir -p "$ROOT"
chmod 0755 "$ROOT"
if [ "$(id -u)" -eq 0 ]; then chown "$RUN_USER" "$ROOT"; fi
cd "$ROOT" # the server user may not be able to read the caller's directory

# ---- data directory -------------------------------------------------------------------------

MAJOR=$("$BINDIR/pg_ctl" --version | sed -nE 's/^[^0-9]*([0-9]+).*/\1/p')
if [ -f "$DATA/PG_VERSION" ] && [ "$(cat "$DATA/PG_VERSION")" != "$MAJOR" ]; then
    log "data directory $DATA is for PostgreSQL $(cat "$DATA/PG_VERSION"), not $MAJOR: recreating"
    as_pg "$BINDIR/pg_ctl" -D "$DATA" -m immediate stop >&2 2>/dev/null || true
    rm -rf "$DATA"
fi
if [ ! -f "$DATA/PG_VERSION" ]; then
    rm -rf "$DATA"
    log "initdb $DATA (as $RUN_USER)"
    as_pg "$BINDIR/initdb" -D "$DATA" -U postgres -E UTF8 --no-locale \
        --auth-local=trust --auth-host=trust >"$ROOT/initdb.log" 2>&1 \
        || { cat "$ROOT/initdb.log" >&2; die "initdb failed"; }
    echo "include_if_exists = 'badput.conf'" >>"$DATA/postgresql.conf"
fi

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
conf_port() { sed -nE "s/^port = ([0-9]+)$/\1/p" "$DATA/badput.conf" 2>/dev/null || true; }

# ---- start, or reuse ------------------------------------------------------------------------

PORT=""
if as_pg "$BINDIR/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    PORT=$(conf_port)
    if [ -n "$PORT" ] && "$BINDIR/pg_isready" -q -h 127.0.0.1 -p "$PORT" -t 5; then
        log "reusing the server already running on 127.0.0.1:$PORT"
    else
        log "a server runs on $DATA but does not answer: restarting it"
        as_pg "$BINDIR/pg_ctl" -D "$DATA" -m fast -w stop >&2 || true
        PORT=""
    fi
fi
if [ -z "$PORT" ]; then
    PORT=$FIRST_PORT
    while port_taken "$PORT"; do
        PORT=$((PORT + 1))
        ((PORT < FIRST_PORT + 100)) || die "no free port in $FIRST_PORT..$PORT"
    done
    # Loopback only, a socket directory we own; durability is not needed for test data.
    cat >"$DATA/badput.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$ROOT'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    if [ "$(id -u)" -eq 0 ]; then chown "$RUN_USER" "$DATA/badput.conf"; fi
    log "starting PostgreSQL on 127.0.0.1:$PORT (log: $ROOT/server.log)"
    as_pg "$BINDIR/pg_ctl" -D "$DATA" -l "$ROOT/server.log" -w -t 60 start >&2 \
        || { tail -n 30 "$ROOT/server.log" >&2 || true; die "the server did not start"; }
fi

for _ in $(seq 1 60); do
    "$BINDIR/pg_isready" -q -h 127.0.0.1 -p "$PORT" -t 2 && break
    sleep 1
done
"$BINDIR/pg_isready" -h 127.0.0.1 -p "$PORT" -t 5 >&2 || die "the server does not answer on 127.0.0.1:$PORT"

# ---- role and database ----------------------------------------------------------------------

psql_admin() {
    "$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres -d postgres "$@"
}
if [ -z "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'")" ]; then
    log "creating role $ROLE"
    psql_admin -c "CREATE ROLE $ROLE LOGIN CREATEDB" >&2
fi
if [ -z "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'")" ]; then
    log "creating database $DB"
    psql_admin -c "CREATE DATABASE $DB OWNER $ROLE" >&2
fi

echo "export BADPUT_TEST_PG_URL=postgresql://$ROLE@127.0.0.1:$PORT/$DB"
