#!/usr/bin/env bash
# The servers the test suite and the scale-out deployment need, on 127.0.0.1:
#   postgres  PostgreSQL on 5432, trust auth for user postgres, database `test`
#   redis     Redis on 6379 (the Celery broker of scripts/cluster.sh)
#   nats      NATS with JetStream on 4222 (nats_input's tests)
#
#   bash scripts/services.sh up [SERVICE...]      install what is missing, start, wait
#   bash scripts/services.sh status [SERVICE...]  one line each; non-zero if one is down
#   bash scripts/services.sh down [SERVICE...]    stop what this script started
#
# No SERVICE means all three. `up` installs a missing server from Debian's packages
# (apt-get update first, quietly, only when something is missing; needs root), keeps
# its data and logs under $AIRFLOW_CONNECTORS_SERVICES_HOME (default
# /var/tmp/airflow-connectors/services, outside the repository) and prints one line per
# service. It is idempotent: a server already answering on its port (a developer's own,
# one the machine starts, or one a previous `up` started) is used, not replaced, and
# `down` stops only servers this script started.
#
# Servers elsewhere: when AIRFLOW_CONNECTORS_TEST_PG (an SQLAlchemy URL),
# AIRFLOW_CONNECTORS_TEST_REDIS (host:port) or AIRFLOW_CONNECTORS_TEST_NATS (nats://host:port)
# is set, that service is the user's: nothing is installed or started for it, and
# `status` checks that address.
set -euo pipefail

HOME_DIR=${AIRFLOW_CONNECTORS_SERVICES_HOME:-/var/tmp/airflow-connectors/services}
ALL=(postgres redis nats)
APT_UPDATED=0

say() { printf '%-9s %s\n' "$1:" "$2"; }

is_root() { [ "$(id -u)" = 0 ]; }

# Answers a TCP connection on 127.0.0.1:$1?
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for() { # wait_for SECONDS COMMAND...: until COMMAND succeeds, or fail
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

apt_install() { # apt_install PACKAGE...: Debian packages, or a one-line instruction
    if ! is_root || ! command -v apt-get >/dev/null; then
        echo "services: $* not installed; install them (Debian: apt-get install $*) or point the suite at your own server (see docs/development.md)" >&2
        return 1
    fi
    local log="$HOME_DIR/apt.log"
    mkdir -p "$HOME_DIR"
    if [ "$APT_UPDATED" = 0 ]; then
        apt-get update -qq >"$log" 2>&1 || { echo "services: apt-get update failed; see $log" >&2; return 1; }
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >>"$log" 2>&1 \
        || { echo "services: apt-get install $* failed; see $log" >&2; return 1; }
}

# --- PostgreSQL ------------------------------------------------------------------------

pg_bindir() { # the newest Debian server (/usr/lib/postgresql/N/bin), or nothing
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -n "$dir" ] && [ -x "$dir/postgres" ] && echo "$dir"
}

pg_run() { # run a PostgreSQL program as its owner (postgres when we are root)
    if is_root; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

pg_ready() { pg_run "$(pg_bindir)/psql" -h 127.0.0.1 -p 5432 -U postgres -d postgres -tAc 'select 1' >/dev/null 2>&1; }

postgres_up() {
    if [ -n "${AIRFLOW_CONNECTORS_TEST_PG:-}" ]; then
        say postgres "AIRFLOW_CONNECTORS_TEST_PG is set: using that server, nothing started"
        return 0
    fi
    local installed="" bin data="$HOME_DIR/postgres"
    if [ -z "$(pg_bindir)" ]; then
        apt_install postgresql
        installed="installed postgresql (Debian), "
        # A cluster the package created and started itself is not ours to keep on 5432.
        if command -v pg_lsclusters >/dev/null; then
            pg_lsclusters -h 2>/dev/null | awk '$4 == "online" && $3 == 5432 {print $1, $2}' \
                | while read -r ver name; do pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" stop; done
        fi
    fi
    bin=$(pg_bindir)
    if listening 5432; then
        if pg_ready; then
            say postgres "${installed}already running on 127.0.0.1:5432, used as it is$(ensure_test_db)"
            return 0
        fi
        echo "services: something listens on 127.0.0.1:5432 but does not let user postgres in without a password; stop it, or set AIRFLOW_CONNECTORS_TEST_PG to a URL that works" >&2
        return 1
    fi
    mkdir -p "$HOME_DIR"
    chmod 755 "$HOME_DIR"
    if [ ! -f "$data/PG_VERSION" ]; then
        mkdir -p "$data"
        is_root && chown postgres: "$data"
        chmod 700 "$data"
        pg_run "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >"$HOME_DIR/postgres-initdb.log" 2>&1 \
            || { echo "services: initdb failed; see $HOME_DIR/postgres-initdb.log" >&2; return 1; }
        installed="${installed}created a cluster in $data, "
    fi
    # A test server: no durability to the disk (a crash of this machine loses only test
    # data), connections for the suite's side-by-side Airflow deployments.
    pg_run "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p 5432 -c unix_socket_directories=$data -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
        start >/dev/null \
        || { echo "services: PostgreSQL did not start; see $data/server.log" >&2; return 1; }
    wait_for 30 pg_ready || { echo "services: PostgreSQL does not answer; see $data/server.log" >&2; return 1; }
    say postgres "${installed}started on 127.0.0.1:5432 (data $data)$(ensure_test_db)"
}

ensure_test_db() { # prints ", created database test" when it had to
    local psql
    psql="$(pg_bindir)/psql"
    if [ "$(pg_run "$psql" -h 127.0.0.1 -p 5432 -U postgres -d postgres -tAc "select 1 from pg_database where datname = 'test'")" != 1 ]; then
        pg_run "$psql" -h 127.0.0.1 -p 5432 -U postgres -d postgres -qc 'create database test' >/dev/null
        printf ', created database test'
    fi
}

postgres_status() {
    if [ -n "${AIRFLOW_CONNECTORS_TEST_PG:-}" ]; then
        if "$(dirname "$0")/../.venv/bin/python" -c 'import os, sqlalchemy as sa; sa.create_engine(os.environ["AIRFLOW_CONNECTORS_TEST_PG"]).connect().close()' 2>/dev/null; then
            say postgres "up (AIRFLOW_CONNECTORS_TEST_PG)"
            return 0
        fi
        say postgres "DOWN: AIRFLOW_CONNECTORS_TEST_PG does not accept connections"
        return 1
    fi
    if [ -n "$(pg_bindir)" ] && pg_ready; then
        say postgres "up on 127.0.0.1:5432 (user postgres, trust)"
    else
        say postgres "DOWN: nothing lets user postgres in on 127.0.0.1:5432 (bash scripts/services.sh up postgres)"
        return 1
    fi
}

postgres_down() {
    local data="$HOME_DIR/postgres"
    if [ -f "$data/postmaster.pid" ] && [ -n "$(pg_bindir)" ]; then
        pg_run "$(pg_bindir)/pg_ctl" -D "$data" -m fast -w stop >/dev/null
        say postgres "stopped"
    else
        say postgres "not started by this script; left alone"
    fi
}

# --- Redis -----------------------------------------------------------------------------

redis_addr() { echo "${AIRFLOW_CONNECTORS_TEST_REDIS:-127.0.0.1:6379}"; }

redis_ping() {
    local addr
    addr=$(redis_addr)
    [ "$(redis-cli -h "${addr%:*}" -p "${addr##*:}" ping 2>/dev/null)" = PONG ]
}

redis_up() {
    if [ -n "${AIRFLOW_CONNECTORS_TEST_REDIS:-}" ]; then
        say redis "AIRFLOW_CONNECTORS_TEST_REDIS is set: using that server, nothing started"
        return 0
    fi
    local installed="" dir="$HOME_DIR/redis"
    if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
        apt_install redis-server redis-tools
        installed="installed redis-server (Debian), "
    fi
    if redis_ping; then
        say redis "${installed}already running on 127.0.0.1:6379, used as it is"
        return 0
    fi
    if listening 6379; then
        echo "services: something listens on 127.0.0.1:6379 but does not answer PING; stop it, or set AIRFLOW_CONNECTORS_TEST_REDIS" >&2
        return 1
    fi
    mkdir -p "$dir"
    redis-server --bind 127.0.0.1 --port 6379 --daemonize yes --dir "$dir" \
        --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --save '' --appendonly no \
        --databases 64 >/dev/null
    wait_for 20 redis_ping || { echo "services: Redis does not answer; see $dir/redis.log" >&2; return 1; }
    say redis "${installed}started on 127.0.0.1:6379 (log $dir/redis.log)"
}

redis_status() {
    if redis_ping; then
        say redis "up on $(redis_addr)"
    else
        say redis "DOWN: no PONG from $(redis_addr) (bash scripts/services.sh up redis)"
        return 1
    fi
}

redis_down() { stop_pidfile redis "$HOME_DIR/redis/redis.pid"; }

# --- NATS ------------------------------------------------------------------------------

nats_addr() { local url=${AIRFLOW_CONNECTORS_TEST_NATS:-nats://127.0.0.1:4222}; echo "${url#*://}"; }

nats_jetstream() { # the server's INFO line says jetstream is on
    local addr info
    addr=$(nats_addr)
    info=$({ exec 3<>"/dev/tcp/${addr%:*}/${addr##*:}"; } 2>/dev/null && timeout 3 head -n 1 <&3) || return 1
    [[ "$info" == INFO* && "$info" == *'"jetstream":true'* ]]
}

nats_up() {
    if [ -n "${AIRFLOW_CONNECTORS_TEST_NATS:-}" ]; then
        say nats "AIRFLOW_CONNECTORS_TEST_NATS is set: using that server, nothing started"
        return 0
    fi
    local installed="" dir="$HOME_DIR/nats"
    if ! command -v nats-server >/dev/null; then
        apt_install nats-server
        installed="installed nats-server (Debian), "
    fi
    if nats_jetstream; then
        say nats "${installed}already running with JetStream on 127.0.0.1:4222, used as it is"
        return 0
    fi
    if listening 4222; then
        echo "services: something listens on 127.0.0.1:4222 but is not NATS with JetStream; stop it, or set AIRFLOW_CONNECTORS_TEST_NATS" >&2
        return 1
    fi
    mkdir -p "$dir/store"
    setsid nohup nats-server -a 127.0.0.1 -p 4222 -js -sd "$dir/store" -P "$dir/nats.pid" \
        -l "$dir/nats.log" </dev/null >/dev/null 2>&1 &
    wait_for 20 nats_jetstream || { echo "services: NATS does not answer with JetStream; see $dir/nats.log" >&2; return 1; }
    say nats "${installed}started with JetStream on 127.0.0.1:4222 (store $dir/store)"
}

nats_status() {
    if nats_jetstream; then
        say nats "up with JetStream on $(nats_addr)"
    else
        say nats "DOWN: no NATS with JetStream on $(nats_addr) (bash scripts/services.sh up nats)"
        return 1
    fi
}

nats_down() { stop_pidfile nats "$HOME_DIR/nats/nats.pid"; }

stop_pidfile() { # stop_pidfile NAME PIDFILE
    local pid
    pid=$(cat "$2" 2>/dev/null || true)
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
        wait_for 20 bash -c "! kill -0 $pid 2>/dev/null" || kill -9 "$pid" 2>/dev/null || true
        rm -f "$2"
        say "$1" "stopped"
    else
        say "$1" "not started by this script; left alone"
    fi
}

# --- main ------------------------------------------------------------------------------

action=${1:-}
case "$action" in
up | status | down) shift ;;
*)
    echo "usage: bash scripts/services.sh up|status|down [postgres] [redis] [nats]" >&2
    exit 2
    ;;
esac
services=("$@")
[ "${#services[@]}" -gt 0 ] || services=("${ALL[@]}")
code=0
for service in "${services[@]}"; do
    case "$service" in
    postgres | redis | nats) "${service}_${action}" || code=1 ;;
    *)
        echo "services: unknown service '$service' (known: ${ALL[*]})" >&2
        code=2
        ;;
    esac
done
exit "$code"
