#!/usr/bin/env bash
# Makes sure the tests have a PostgreSQL and a Redis to talk to, then runs
# the command given (by default the whole test suite).
#
# It uses BERTH_TEST_DATABASE_URL / BERTH_TEST_REDIS_URL when set, else the
# servers on 127.0.0.1:5432 and :6379 when they answer, else it starts
# throw-away ones from the installed binaries (initdb/pg_ctl, redis-server)
# in a temporary folder, on loopback only, and stops them on exit.
# BERTH_TEST_THROWAWAY=1 starts throw-away servers even when others answer.
set -euo pipefail

cd "$(dirname "$0")/.."
tmp=""
cleanup() {
  if [ -n "${pgdata:-}" ] && [ -d "$pgdata" ]; then
    as_pg "$pg_ctl" -D "$pgdata" -m immediate stop >/dev/null 2>&1 || true
  fi
  if [ -n "${redis_pid:-}" ]; then kill "$redis_pid" 2>/dev/null || true; fi
  if [ -n "$tmp" ]; then rm -rf "$tmp"; fi
}
trap cleanup EXIT

say() { printf 'testenv: %s\n' "$*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
    echo $((20000 + RANDOM % 20000))
}

# PostgreSQL refuses to run as root: run its tools as the postgres user then.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u "$pguser" -- "$@"
  else
    "$@"
  fi
}

pg_bin() {
  local name=$1 dir
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  for dir in /usr/lib/postgresql/*/bin /usr/local/pgsql/bin /opt/homebrew/bin; do
    if [ -x "$dir/$name" ]; then echo "$dir/$name"; return; fi
  done
  return 1
}

pg_answers() { # host port
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -h "$1" -p "$2" -t 2
  else
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
  fi
}

fresh=${BERTH_TEST_THROWAWAY:-}

if [ -z "${BERTH_TEST_DATABASE_URL:-}" ]; then
  if [ -z "$fresh" ] && pg_answers 127.0.0.1 5432; then
    export BERTH_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
  else
    initdb=$(pg_bin initdb) && pg_ctl=$(pg_bin pg_ctl) || {
      say "no PostgreSQL answers on 127.0.0.1:5432 and initdb/pg_ctl are not installed."
      say "Install PostgreSQL 15 or newer with its contrib modules (Debian: apt-get install postgresql postgresql-contrib),"
      say "or point BERTH_TEST_DATABASE_URL at a server where user postgres may create databases."
      exit 1
    }
    tmp=${tmp:-$(mktemp -d)}
    pguser=$(id -un)
    if [ "$(id -u)" = 0 ]; then
      pguser=postgres
      id postgres >/dev/null 2>&1 || pguser=nobody
      chmod 755 "$tmp"
    fi
    pgdata="$tmp/pg"
    mkdir -p "$pgdata" && chown "$pguser" "$pgdata" 2>/dev/null || true
    port=$(free_port)
    say "starting a throw-away PostgreSQL on 127.0.0.1:$port"
    as_pg "$initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null
    as_pg "$pg_ctl" -D "$pgdata" -w -l "$pgdata/log" \
      -o "-h 127.0.0.1 -p $port -k $pgdata -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
      start >/dev/null
    export BERTH_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  fi
fi

if [ -z "${BERTH_TEST_REDIS_URL:-}" ]; then
  if [ -z "$fresh" ] && (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
    export BERTH_TEST_REDIS_URL="redis://127.0.0.1:6379/0"
  elif command -v redis-server >/dev/null 2>&1; then
    tmp=${tmp:-$(mktemp -d)}
    port=$(free_port)
    say "starting a throw-away Redis on 127.0.0.1:$port"
    redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    export BERTH_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
  else
    say "no Redis answers on 127.0.0.1:6379 and redis-server is not installed."
    say "Install Redis 6 or newer (Debian: apt-get install redis-server), or set BERTH_TEST_REDIS_URL."
    exit 1
  fi
fi

if [ $# -eq 0 ]; then
  set -- go test -race -count=1 -timeout 20m ./...
fi
"$@"
