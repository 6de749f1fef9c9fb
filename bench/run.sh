#!/usr/bin/env bash
# Turnpike benchmark harness: turnpike vs nginx (and HAProxy) on 127.0.0.1.
# Method and cases: docs/benchmarks.md.   Usage: bench/run.sh --help
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$BENCH_DIR/.." && pwd)
CONFIGS=$BENCH_DIR/configs
RESULTS=$BENCH_DIR/results
PY=${PYTHON:-python3}
LIB=$BENCH_DIR/benchlib.py
# shellcheck source=common.sh
. "$BENCH_DIR/common.sh"
# `--suite NAME` runs the benchmark suites (membrane, apisix, wso2, all, smoke) of bench/suite.py,
# with turnpike and its peers side by side and a report with charts; see docs/benchmarks.md.
for a in "$@"; do
    if [[ $a == --suite || $a == --suite=* ]]; then
        BENCH_COMMAND="bench/run.sh $*" exec "${PYTHON:-python3}" "$BENCH_DIR/suite.py" run "$@"
    fi
done
INSTALL_CMD="apt-get update && apt-get install -y nginx-light wrk haproxy curl util-linux iproute2 python3   (or: bench/install-deps.sh)"

# ---- defaults --------------------------------------------------------------
ROUNDS=3
DURATION=10
SETTLE=1       # seconds of each wrk run before the measured window (connections, handshakes)
TAIL=1         # and after it
WINDOW_MIN=3   # shorter runs are measured whole
CONNECTIONS=50
TURNPIKE=${CARGO_TARGET_DIR:-$REPO_DIR/target}/release/turnpike
SYSTEMS=turnpike,nginx,haproxy   # hidden option --systems (harness self-test)
CASES=short,proxy,routes,openapi,jsonprot,rest2soap,soapvalidate   # option --cases
KEEP_TMP=0                       # hidden option --keep-tmp
CPU_QUOTA=""                     # option --cpu-quota: percent of its CPU the system under test may use
QUOTA_PERIOD_US=10000            # option --quota-period: the quota's period in µs (docs/benchmarks.md)
QUOTA_CG=""                      # the cgroup that enforces it
READY_TIMEOUT=${BENCH_READY_TIMEOUT:-10}   # s to wait for a server to answer 200
STOP_TIMEOUT=${BENCH_STOP_TIMEOUT:-40}     # s to wait after SIGTERM before SIGKILL (turnpike grace: 30 s)
SUT_CPU=1    # system under test
LOAD_CPU=0   # wrk and the nginx backend

# ---- fixed ports, 127.0.0.1 only (they are also written in bench/configs/*) -
P_TP_SHORT=2000      # turnpike-return.yaml
P_TP_PROXY=2001      # turnpike-proxy.yaml
P_TP_ROUTES=2002     # turnpike-1api.yaml and the generated 10,000-API config
P_TP_OPENAPI=2006    # turnpike-openapi.yaml (openapi, Membrane's scenario 5)
P_TP_JSONPROT=2007   # turnpike-jsonprotection.yaml (jsonprot)
P_TP_REST2SOAP=2003  # turnpike-rest2soap.yaml (scenario 6)
P_TP_SOAPVAL=2004    # turnpike-soap-validate.yaml (scenario 7)
P_TP_SOAPPLAIN=2005  # turnpike-soap-plain.yaml (baseline of 6 and 7)
P_BACKEND=2010       # nginx-backend.conf: the 1 KB JSON backend
P_STATUS=2011        # nginx-backend.conf: stub_status of the backend
P_NGINX_SHORT=2020   # nginx-return.conf
P_NGINX_PROXY=2021   # nginx-proxy.conf
P_HAPROXY=2031       # haproxy-proxy.cfg

usage() {
    cat <<EOF
Usage: bench/run.sh [--rounds N] [--duration SECS] [--connections C] [--turnpike PATH]
       bench/run.sh --suite membrane|apisix|wso2|all|smoke [--quick] [--turnpike PATH] [...]
                    (the benchmark suites with peers and charts: bench/suite.py run --help)

Benchmarks turnpike against nginx (and HAProxy) on 127.0.0.1, the system under
test pinned to CPU $SUT_CPU, wrk and the backend to CPU $LOAD_CPU. See docs/benchmarks.md.

  --rounds N         rounds; each round runs every case and system once (default $ROUNDS)
  --duration SECS    duration of each wrk run (default $DURATION); from $WINDOW_MIN s up, CPU
                     and requests are measured in a window that leaves out the first
                     $SETTLE s (connections, TLS handshakes) and the last $TAIL s
  --connections C    wrk connections (default $CONNECTIONS)
  --turnpike PATH    turnpike binary (default target/release/turnpike;
                     build it with: cargo build --release)
  --cases LIST       comma-separated cases (default $CASES):
                     short, proxy, routes, auth, matrix, tls, h2, openapi (Membrane
                     scenario 5), jsonprot, rest2soap (scenario 6), soapvalidate (scenario 7)
  --cpu-quota PCT    gateway-bound mode: the system under test may use only PCT% of its
                     CPU (a cgroup CPU quota; needs root), so that it, not the load CPU,
                     limits req/s in every case (see docs/benchmarks.md)
  --quota-period US  the quota's period in microseconds (default $QUOTA_PERIOD_US); the
                     system under test may run PCT% of each period. Long periods let it
                     outrun the load CPU within its slice and then idle (docs/benchmarks.md)

Results (medians over rounds) are printed and written to bench/results/<timestamp>.md.
Dependencies: $INSTALL_CMD
EOF
}

log()  { printf '[bench] %s\n' "$*" >&2; }
warn() { printf '[bench] WARNING: %s\n' "$*" >&2; }
die()  { printf 'bench/run.sh: error: %s\n' "$*" >&2; exit 1; }

# ---- arguments ---------------------------------------------------------------
ORIG_ARGS="$*"
args=()
for a in "$@"; do
    case $a in
        --*=*) args+=("${a%%=*}" "${a#*=}") ;;
        *) args+=("$a") ;;
    esac
done
set -- "${args[@]}"
while (($#)); do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --rounds|--duration|--connections|--turnpike|--systems|--cases|--cpu-quota|--quota-period)
            (($# >= 2)) || die "$1 needs a value (see --help)"
            case $1 in
                --rounds) ROUNDS=$2 ;;
                --duration) DURATION=$2 ;;
                --connections) CONNECTIONS=$2 ;;
                --turnpike) TURNPIKE=$2 ;;
                --systems) SYSTEMS=$2 ;;
                --cases) CASES=$2 ;;
                --cpu-quota) CPU_QUOTA=$2 ;;
                --quota-period) QUOTA_PERIOD_US=$2 ;;
            esac
            shift 2 ;;
        --keep-tmp) KEEP_TMP=1; shift ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
for v in ROUNDS DURATION CONNECTIONS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v,,} must be a positive integer, got '${!v}'"
done
if [[ -n $CPU_QUOTA ]] && ! { [[ $CPU_QUOTA =~ ^[1-9][0-9]*$ ]] && ((CPU_QUOTA <= 100)); }; then
    die "--cpu-quota must be a percentage from 1 to 100, got '$CPU_QUOTA'"
fi
[[ $QUOTA_PERIOD_US =~ ^[1-9][0-9]*$ ]] && ((QUOTA_PERIOD_US <= 1000000)) \
    || die "--quota-period must be a number of microseconds up to 1000000, got '$QUOTA_PERIOD_US'"
if [[ -n $CPU_QUOTA ]] && ((QUOTA_PERIOD_US * CPU_QUOTA / 100 < 1000)); then
    die "--cpu-quota $CPU_QUOTA with --quota-period $QUOTA_PERIOD_US leaves less than the kernel's minimum of 1000 µs per period; use a longer period"
fi

has_system() { [[ ,$SYSTEMS, == *,"$1",* ]]; }
has_case()   { [[ ,$CASES, == *,"$1",* ]]; }
IFS=, read -ra _s <<<"$SYSTEMS"
for s in "${_s[@]}"; do
    case $s in turnpike|nginx|haproxy) ;; *) die "--systems: unknown system '$s' (known: turnpike,nginx,haproxy)" ;; esac
done
IFS=, read -ra _c <<<"$CASES"
for c in "${_c[@]}"; do
    case $c in
        short|proxy|routes|auth|matrix|tls|h2|openapi|jsonprot|rest2soap|soapvalidate) ;;
        *) die "--cases: unknown case '$c' (known: short,proxy,routes,auth,matrix,tls,h2,openapi,jsonprot,rest2soap,soapvalidate)" ;;
    esac
done

# ---- the run plan: "case/system" pairs, in the order they run in every round -
PLAN=()
if has_case short; then
    has_system turnpike && PLAN+=(short/turnpike)
    has_system nginx    && PLAN+=(short/nginx)
fi
if has_case proxy; then
    has_system turnpike && PLAN+=(proxy/turnpike)
    has_system nginx    && PLAN+=(proxy/nginx)
    has_system haproxy  && PLAN+=(proxy/haproxy)
fi
if has_case routes; then
    if has_system turnpike; then
        PLAN+=(routes/turnpike-1api routes/turnpike-10k)
    else
        log "case 'routes' (10,000 APIs vs 1 API) needs turnpike: skipped"
    fi
fi
if has_case auth; then
    if has_system turnpike; then PLAN+=(auth/turnpike-plain auth/turnpike-s3); else log "case 'auth' needs turnpike: skipped"; fi
fi
if has_case matrix; then
    if has_system turnpike; then
        for n in 1 100; do for pol in plain key limit both; do PLAN+=("matrix/turnpike-$pol-$n"); done; done
    else
        log "case 'matrix' needs turnpike: skipped"
    fi
fi
if has_case tls; then
    has_system turnpike && PLAN+=(tls/turnpike-plainhttp tls/turnpike-tlsclients tls/turnpike-tls tls/turnpike-s4)
    has_system nginx && PLAN+=(tls/nginx-tls)
fi
if has_case h2; then
    has_system turnpike && PLAN+=(h2/turnpike-h2)
    has_system nginx && PLAN+=(h2/nginx-h2)
fi
# openapi (Membrane's scenario 5) and jsonprot POST the Mangos body; each is compared with
# turnpike's plain proxy in the same round (same body, same backend).
for c in openapi jsonprot; do
    if has_case $c; then
        if has_system turnpike; then
            PLAN+=("$c/turnpike-proxy" "$c/turnpike-$c")
        else
            log "case '$c' needs turnpike: skipped"
        fi
    fi
done
# Scenarios 6 and 7 compare against turnpike plainly proxying the same SOAP POST to the same
# backend in the same round.
for c in rest2soap soapvalidate; do
    if has_case $c; then
        if has_system turnpike; then
            PLAN+=($c/turnpike-plain)
            [[ $c == rest2soap ]] && PLAN+=(rest2soap/turnpike-rest2soap)
            [[ $c == soapvalidate ]] && PLAN+=(soapvalidate/turnpike-validate)
        else
            log "case '$c' needs turnpike: skipped"
        fi
    fi
done
((${#PLAN[@]})) || die "nothing to run for --systems $SYSTEMS --cases $CASES"

# ---- prerequisites -------------------------------------------------------------
missing=()
for t in taskset wrk nginx haproxy curl "$PY" getconf ss; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
if ((${#missing[@]})); then
    die "missing tools: ${missing[*]}
Install them with: $INSTALL_CMD"
fi
(($(nproc) >= 2)) && taskset -c "$SUT_CPU" true 2>/dev/null \
    || die "needs at least 2 usable CPUs (pins the system under test to CPU $SUT_CPU, load to CPU $LOAD_CPU)"
if has_system turnpike; then
    [[ $TURNPIKE == /* ]] || TURNPIKE=$PWD/$TURNPIKE
    [[ -f $TURNPIKE && -x $TURNPIKE ]] || die "turnpike binary not found (or not executable): $TURNPIKE
Build it first with:  (cd $REPO_DIR && cargo build --release)
or point to one with: bench/run.sh --turnpike PATH"
fi
CLK_TCK=$(getconf CLK_TCK)
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

# ---- process bookkeeping and cleanup ------------------------------------------
TMP=""
PIDS=()       # every server process this script started and has not reaped
STOP_RC=0

alive() {  # PID exists and is not a zombie
    local st
    st=$(awk '/^State:/ {print $2; exit}' "/proc/$1/status" 2>/dev/null) || return 1
    [[ -n $st && $st != Z ]]
}

forget_pid() {
    local p keep=()
    for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

stop_pid() {  # stop_pid PID [TIMEOUT]: SIGTERM, wait, SIGKILL; exit status in STOP_RC
    local pid=$1 timeout=${2:-$STOP_TIMEOUT} i kids
    STOP_RC=0
    kids=$(pgrep -P "$pid" 2>/dev/null || true)   # e.g. nginx workers
    if alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < timeout * 10; i++)); do
            alive "$pid" || break
            sleep 0.1
        done
        if alive "$pid"; then
            warn "pid $pid still running ${timeout}s after SIGTERM: sending SIGKILL"
            # shellcheck disable=SC2086
            kill -KILL "$pid" $kids 2>/dev/null || true
        fi
    fi
    wait "$pid" 2>/dev/null || STOP_RC=$?
    forget_pid "$pid"
}

cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do
        stop_pid "$pid" 5 2>/dev/null || true
    done
    if [[ -n $QUOTA_CG && -d $QUOTA_CG ]]; then rmdir "$QUOTA_CG" 2>/dev/null || true; fi
    if [[ -n $TMP && -d $TMP ]]; then
        if ((KEEP_TMP)); then log "kept temp dir $TMP"; else rm -rf "$TMP"; fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

start_server() {  # start_server LOGFILE CMD...; sets SERVER_PID
    local logf=$1
    shift
    "$@" </dev/null >"$logf" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
}

setup_quota() {  # a cgroup limiting its members to CPU_QUOTA% of one CPU in each QUOTA_PERIOD_US
    local period=$QUOTA_PERIOD_US quota=$((QUOTA_PERIOD_US * CPU_QUOTA / 100))
    if [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then   # cgroup v2
        QUOTA_CG=/sys/fs/cgroup/turnpike-bench-$$
        grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null \
            || echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
        mkdir "$QUOTA_CG" 2>/dev/null && echo "$quota $period" >"$QUOTA_CG/cpu.max" 2>/dev/null \
            || die "--cpu-quota: cannot create a cgroup with a CPU limit under /sys/fs/cgroup (needs root and the cpu controller)"
    elif [[ -d /sys/fs/cgroup/cpu ]]; then                  # cgroup v1
        QUOTA_CG=/sys/fs/cgroup/cpu/turnpike-bench-$$
        mkdir "$QUOTA_CG" 2>/dev/null && echo "$period" >"$QUOTA_CG/cpu.cfs_period_us" \
            && echo "$quota" >"$QUOTA_CG/cpu.cfs_quota_us" \
            || die "--cpu-quota: cannot create a cgroup under /sys/fs/cgroup/cpu (needs root)"
    else
        die "--cpu-quota: no cgroup CPU controller mounted under /sys/fs/cgroup"
    fi
}

fail_server() {  # fail_server MESSAGE LOGFILE [DIR]
    printf 'bench/run.sh: error: %s\n' "$1" >&2
    local f
    for f in "$2" ${3:+"$3"/error.log}; do
        if [[ -s $f ]]; then
            printf -- '--- last lines of %s:\n' "$f" >&2
            tail -n 30 "$f" >&2
        fi
    done
    exit 1
}

wait_ready() {  # wait_ready PID URL EXPECTED_BODY_FILE|"" LOGFILE [DIR] [HEADER]
    local pid=$1 url=$2 expect=$3 logf=$4 dir=${5:-} hdr=${6:-} code=000 deadline=$((SECONDS + READY_TIMEOUT))
    local hargs=()
    [[ -n $hdr ]] && hargs=(-H "$hdr")
    while :; do
        alive "$pid" || fail_server "server for $url exited during startup" "$logf" "$dir"
        code=$(curl -sk "${hargs[@]}" -o "$TMP/ready.body" -w '%{http_code}' --max-time 1 "$url" 2>/dev/null) || code=000
        if [[ $code == 200 ]]; then
            [[ -z $expect ]] && return 0
            cmp -s "$TMP/ready.body" "$expect" && return 0
            fail_server "$url answered 200 but not with the backend's JSON body" "$logf" "$dir"
        fi
        ((SECONDS < deadline)) \
            || fail_server "no HTTP 200 from $url within ${READY_TIMEOUT}s (last status: $code)" "$logf" "$dir"
        sleep 0.1
    done
}

ensure_ports_free() {
    local busy
    busy=$("$PY" "$LIB" ports-free "$@") \
        || die "port(s) already in use on 127.0.0.1: $busy (the harness needs 2000-2099; stop whatever listens there)"
}

backend_accepts() {  # nginx stub_status: 3rd line is "accepts handled requests"
    curl -sf --max-time 2 "http://127.0.0.1:$P_STATUS/status" | awk 'NR == 3 {print $1}'
}

# ---- start -------------------------------------------------------------------
TMP=$(mktemp -d "${TMPDIR:-/tmp}/turnpike-bench.XXXXXX")
if [[ -n $CPU_QUOTA ]]; then setup_quota; fi
chmod 755 "$TMP"   # nginx workers may run as an unprivileged user

declare -A PORT=(
    [short/turnpike]=$P_TP_SHORT [short/nginx]=$P_NGINX_SHORT
    [proxy/turnpike]=$P_TP_PROXY [proxy/nginx]=$P_NGINX_PROXY [proxy/haproxy]=$P_HAPROXY
    [routes/turnpike-1api]=$P_TP_ROUTES [routes/turnpike-10k]=$P_TP_ROUTES
    [auth/turnpike-plain]=2040 [auth/turnpike-s3]=2041
    [matrix/turnpike-plain-1]=2042 [matrix/turnpike-key-1]=2043 [matrix/turnpike-limit-1]=2044 [matrix/turnpike-both-1]=2045
    [tls/turnpike-plainhttp]=$P_TP_PROXY [tls/turnpike-tlsclients]=2008 [tls/turnpike-tls]=2003 [tls/turnpike-s4]=2004 [tls/nginx-tls]=2022
    [h2/turnpike-h2]=2003 [h2/nginx-h2]=2022
    [matrix/turnpike-plain-100]=2046 [matrix/turnpike-key-100]=2047 [matrix/turnpike-limit-100]=2048 [matrix/turnpike-both-100]=2049
    [openapi/turnpike-proxy]=$P_TP_PROXY [openapi/turnpike-openapi]=$P_TP_OPENAPI
    [jsonprot/turnpike-proxy]=$P_TP_PROXY [jsonprot/turnpike-jsonprot]=$P_TP_JSONPROT
    [rest2soap/turnpike-plain]=$P_TP_SOAPPLAIN [rest2soap/turnpike-rest2soap]=$P_TP_REST2SOAP
    [soapvalidate/turnpike-plain]=$P_TP_SOAPPLAIN [soapvalidate/turnpike-validate]=$P_TP_SOAPVAL
)
# Request header a run sends (credentials of the policy cases), for the readiness check and wrk.
declare -A HDR=(
    [auth/turnpike-s3]="Authorization: Basic bG9hZHRlc3Q6c2VjcmV0"
    [tls/turnpike-s4]="Authorization: Basic bG9hZHRlc3Q6c2VjcmV0"
    [matrix/turnpike-key-1]="X-Api-Key: key-042" [matrix/turnpike-both-1]="X-Api-Key: key-042"
    [matrix/turnpike-key-100]="X-Api-Key: key-042" [matrix/turnpike-both-100]="X-Api-Key: key-042"
)
ports=($P_BACKEND $P_STATUS)
for p in "${PLAN[@]}"; do ports+=("${PORT[$p]}"); done
ensure_ports_free "${ports[@]}"

# Check the reference configs before anything runs.
mkdir -p "$TMP/check"
for conf in nginx-backend.conf nginx-return.conf nginx-proxy.conf; do
    nginx -t -q -p "$TMP/check/" -c "$CONFIGS/$conf" -e "$TMP/check/error.log" \
        || die "nginx rejects $CONFIGS/$conf (see above)"
done
if has_system haproxy; then
    haproxy -c -q -f "$CONFIGS/haproxy-proxy.cfg" || die "haproxy rejects $CONFIGS/haproxy-proxy.cfg"
fi

if has_case routes && has_system turnpike; then
    "$PY" "$BENCH_DIR/gen_many_apis.py" --count 10000 \
        --base "$CONFIGS/turnpike-1api.yaml" --out "$TMP/turnpike-10k.yaml"
fi
if (has_case auth || has_case matrix) && has_system turnpike; then
    "$PY" "$BENCH_DIR/gen_policy_configs.py" "$TMP/policy"
fi
NEED_TLS=0
if has_case tls || has_case h2; then
    NEED_TLS=1
    command -v openssl >/dev/null || die "the tls/h2 cases need openssl"
    if has_case h2; then command -v h2load >/dev/null || die "the h2 case needs h2load (apt-get install nghttp2-client)"; fi
    PKI=$TMP/pki
    bench_make_pki "$PKI"
    # The JSON body of the plain backend (the one `location /` returns), served over TLS too.
    BODY=$(bench_backend_body "$CONFIGS")
    for f in nginx-tls-backend.conf nginx-tls-proxy.conf turnpike-tls.yaml turnpike-tls-clients.yaml turnpike-s4.yaml; do
        bench_fill_template "$CONFIGS/$f.in" "$PKI" "$BODY" >"$TMP/$f"
    done
fi

# Versions and machine, for the report header.
NGINX_VER=$(nginx -v 2>&1 | sed -n 's|.*nginx/\([^ ]*\).*|\1|p')
HAPROXY_VER=$(haproxy -v 2>/dev/null | sed -n '1s/^HAProxy version \([0-9.]*\).*/\1/p') || true
WRK_VER=$(wrk -v 2>&1 | sed -n '1s/^wrk \([^ ]*\).*/\1/p') || true
CPU_MODEL=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1) || true
[[ -n $CPU_MODEL ]] || CPU_MODEL=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
GIT_REV=$(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null) || GIT_REV="no commit"
if [[ -n $(git -C "$REPO_DIR" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
    GIT_REV="$GIT_REV, dirty tree"
fi
STAMP=$(date +%Y%m%d-%H%M%S)
HEADER=$TMP/header.md
{
    echo "# Turnpike benchmark $STAMP"
    echo
    echo "- Machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}, kernel $(uname -r)"
    echo "- Software: nginx ${NGINX_VER:-?}, HAProxy ${HAPROXY_VER:-?}, wrk ${WRK_VER:-?}$(
        has_system turnpike && echo ", turnpike \`${TURNPIKE#"$REPO_DIR"/}\` (repo HEAD: $GIT_REV)")"
    echo "- Load: \`wrk -t1 -c$CONNECTIONS -d${DURATION}s --latency\` pinned to CPU $LOAD_CPU (shared with the nginx backend); system under test pinned to CPU $SUT_CPU"
    echo "- Rounds: $ROUNDS, systems interleaved within each round; tables show medians over rounds"
    [[ -n $CPU_QUOTA ]] && echo "- Gateway-bound mode (\`--cpu-quota $CPU_QUOTA\`): each system under test may use $CPU_QUOTA% of CPU $SUT_CPU (cgroup CPU quota, periods of $QUOTA_PERIOD_US µs), so that it and not the load CPU limits req/s; latencies include the quota's throttling and are not comparable with unlimited runs"
    echo "- Command: \`bench/run.sh${ORIG_ARGS:+ $ORIG_ARGS}\`"
    echo
} >"$HEADER"
log "machine: $(nproc) CPUs, ${CPU_MODEL:-unknown CPU}, kernel $(uname -r); plan per round: ${PLAN[*]}"

# The backend, on the load CPU, for the whole benchmark.
mkdir -p "$TMP/backend"
start_server "$TMP/backend/server.log" taskset -c "$LOAD_CPU" \
    nginx -p "$TMP/backend/" -c "$CONFIGS/nginx-backend.conf" -e "$TMP/backend/error.log"
BACKEND_PID=$SERVER_PID
wait_ready "$BACKEND_PID" "http://127.0.0.1:$P_BACKEND/" "" "$TMP/backend/server.log" "$TMP/backend"
curl -sf -o "$TMP/backend-body.json" "http://127.0.0.1:$P_BACKEND/bench/any/path"
[[ $(stat -c %s "$TMP/backend-body.json") -ge 1000 ]] || die "backend body is unexpectedly small"
[[ -n $(backend_accepts) ]] || die "cannot read the backend's stub_status on port $P_STATUS"
log "backend up on 127.0.0.1:$P_BACKEND (pid $BACKEND_PID), body $(stat -c %s "$TMP/backend-body.json") bytes"
TLS_BACKEND_PID=
if ((NEED_TLS)); then
    mkdir -p "$TMP/tls-backend"
    start_server "$TMP/tls-backend/server.log" taskset -c "$LOAD_CPU" \
        nginx -p "$TMP/tls-backend/" -c "$TMP/nginx-tls-backend.conf" -e "$TMP/tls-backend/error.log"
    TLS_BACKEND_PID=$SERVER_PID
    for _ in $(seq 50); do curl -sf --cacert "$PKI/ca.pem" --resolve localhost:2012:127.0.0.1 -o /dev/null https://localhost:2012/ && break; sleep 0.1; done
    log "TLS backend up on 127.0.0.1:2012 (pid $TLS_BACKEND_PID)"
fi

run_one() {  # run_one ROUND CASE/SYSTEM
    local round=$1 pair=$2
    local case=${pair%%/*} sys=${pair#*/}
    local dir="$TMP/r$round-$case-$sys"
    local logf="$dir/server.log" port=${PORT[$pair]} path=/ expect="$TMP/backend-body.json" scheme=http
    local cmd pid url a0 a1 ready_path="" script=()
    mkdir -p "$dir"
    case $pair in
        short/turnpike) expect=""; cmd=("$TURNPIKE" run -c "$CONFIGS/turnpike-return.yaml") ;;
        short/nginx) expect=""; cmd=(nginx -p "$dir/" -c "$CONFIGS/nginx-return.conf" -e "$dir/error.log") ;;
        proxy/turnpike) cmd=("$TURNPIKE" run -c "$CONFIGS/turnpike-proxy.yaml") ;;
        proxy/nginx) cmd=(nginx -p "$dir/" -c "$CONFIGS/nginx-proxy.conf" -e "$dir/error.log") ;;
        proxy/haproxy) cmd=(haproxy -db -f "$CONFIGS/haproxy-proxy.cfg") ;;
        routes/turnpike-1api) path=/bench/; cmd=("$TURNPIKE" run -c "$CONFIGS/turnpike-1api.yaml") ;;
        routes/turnpike-10k) path=/bench/; cmd=("$TURNPIKE" run -c "$TMP/turnpike-10k.yaml") ;;
        auth/*) cmd=("$TURNPIKE" run -c "$TMP/policy/auth-${sys#turnpike-}.yaml") ;;
        matrix/*) path=/api000/; cmd=("$TURNPIKE" run -c "$TMP/policy/matrix-${sys#turnpike-}.yaml") ;;
        tls/turnpike-plainhttp) cmd=("$TURNPIKE" run -c "$CONFIGS/turnpike-proxy.yaml") ;;
        tls/turnpike-tls|h2/turnpike-h2) scheme=https; cmd=("$TURNPIKE" run -c "$TMP/turnpike-tls.yaml") ;;
        tls/turnpike-tlsclients) scheme=https; cmd=("$TURNPIKE" run -c "$TMP/turnpike-tls-clients.yaml") ;;
        tls/turnpike-s4) scheme=https; cmd=("$TURNPIKE" run -c "$TMP/turnpike-s4.yaml") ;;
        tls/nginx-tls|h2/nginx-h2) scheme=https; cmd=(nginx -p "$dir/" -c "$TMP/nginx-tls-proxy.conf" -e "$dir/error.log") ;;
        openapi/turnpike-proxy|jsonprot/turnpike-proxy)
            path=/shop/v2/products; script=(-s "$CONFIGS/post-mangos.lua")
            cmd=("$TURNPIKE" run -c "$CONFIGS/turnpike-proxy.yaml") ;;
        openapi/turnpike-openapi)
            path=/shop/v2/products; script=(-s "$CONFIGS/post-mangos.lua")
            cmd=("$TURNPIKE" run -c "$CONFIGS/turnpike-openapi.yaml") ;;
        jsonprot/turnpike-jsonprot)
            path=/shop/v2/products; script=(-s "$CONFIGS/post-mangos.lua")
            cmd=("$TURNPIKE" run -c "$CONFIGS/turnpike-jsonprotection.yaml") ;;
        */turnpike-plain) expect=""; path=/person-service; script=(-s "$CONFIGS/soap-request.lua")
            cmd=("$TURNPIKE" run -c "$CONFIGS/turnpike-soap-plain.yaml") ;;
        rest2soap/turnpike-rest2soap) expect=""; path=/create-person; ready_path=/api-docs
            script=(-s "$CONFIGS/rest2soap.lua"); cmd=("$TURNPIKE" run -c "$CONFIGS/turnpike-rest2soap.yaml") ;;
        soapvalidate/turnpike-validate) expect=""; path=/person-service; ready_path="/person-service?wsdl"
            script=(-s "$CONFIGS/soap-request.lua"); cmd=("$TURNPIKE" run -c "$CONFIGS/turnpike-soap-validate.yaml") ;;
        *) die "internal: unknown run $pair" ;;
    esac
    url="$scheme://127.0.0.1:$port$path"
    log "round $round/$ROUNDS: $case / $sys  ($url)"
    ensure_ports_free "$port"
    if [[ -n $QUOTA_CG ]]; then
        # Join the quota's cgroup, then become the server (same pid, and its children inherit).
        # shellcheck disable=SC2016
        start_server "$logf" sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$QUOTA_CG" \
            taskset -c "$SUT_CPU" "${cmd[@]}"
    else
        start_server "$logf" taskset -c "$SUT_CPU" "${cmd[@]}"
    fi
    pid=$SERVER_PID
    local hdr=${HDR[$pair]:-} wargs=()
    [[ -n $hdr ]] && wargs=(-H "$hdr")
    # Readiness: a GET (on `ready_path` when the measured request is a POST that needs a body).
    wait_ready "$pid" "$scheme://127.0.0.1:$port${ready_path:-$path}" "$expect" "$logf" "$dir" "$hdr"

    a0=$(backend_accepts)
    local load tool
    if [[ $case == h2 ]]; then
        tool=h2load
        load=(h2load -c"$CONNECTIONS" -m10 -D"$DURATION" "${wargs[@]}" "$url")
    else
        tool=wrk
        load=(wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency "${wargs[@]}" "${script[@]}" "$url")
    fi
    if [[ $tool == h2load ]] || ((DURATION < WINDOW_MIN)); then
        # h2load multiplexes requests, so they cannot be counted on the socket, and short runs
        # leave no window: the snapshots bracket the whole run, connection setup included.
        "$PY" "$LIB" proctree "$pid" >"$dir/before.json"
        taskset -c "$LOAD_CPU" "${load[@]}" >"$dir/wrk.txt" 2>&1 \
            || { cat "$dir/wrk.txt" >&2; die "$tool failed against $url"; }
        "$PY" "$LIB" proctree "$pid" >"$dir/after.json"
    else
        # The measured window leaves out wrk's first SETTLE s (connections, TLS handshakes)
        # and last TAIL s; each snapshot counts the requests received on the port so far.
        taskset -c "$LOAD_CPU" "${load[@]}" >"$dir/wrk.txt" 2>&1 &
        local load_pid=$! started
        started=$(date +%s.%N)
        sleep_until "$started + $SETTLE"
        "$PY" "$LIB" proctree "$pid" --port "$port" >"$dir/before.json"
        sleep_until "$started + $DURATION - $TAIL"
        "$PY" "$LIB" proctree "$pid" --port "$port" >"$dir/after.json"
        wait "$load_pid" || { cat "$dir/wrk.txt" >&2; die "$tool failed against $url"; }
    fi
    alive "$pid" || fail_server "$sys exited during the wrk run (interrupted, or it crashed)" "$logf" "$dir"
    a1=$(backend_accepts)

    "$PY" "$LIB" record --round "$round" --case "$case" --system "$sys" --url "$url" \
        --duration "$DURATION" --wrk "$dir/wrk.txt" --before "$dir/before.json" \
        --after "$dir/after.json" --clk-tck "$CLK_TCK" \
        --accepts-before "$a0" --accepts-after "$a1" --summary >>"$TMP/runs.jsonl"

    stop_pid "$pid"
    if [[ $sys == turnpike* && $STOP_RC -ne 0 ]]; then
        warn "turnpike exited with status $STOP_RC after SIGTERM (expected 0); last log lines:"
        tail -n 10 "$logf" >&2 || true
    fi
}

for ((round = 1; round <= ROUNDS; round++)); do
    for pair in "${PLAN[@]}"; do
        run_one "$round" "$pair"
    done
done

stop_pid "$BACKEND_PID" 10
[[ -n $TLS_BACKEND_PID ]] && stop_pid "$TLS_BACKEND_PID" 10

mkdir -p "$RESULTS"
OUT=$RESULTS/$STAMP.md
{
    cat "$HEADER"
    "$PY" "$LIB" report "$TMP/runs.jsonl" \
        ${NGINX_VER:+--nginx-label "nginx $NGINX_VER"} \
        ${HAPROXY_VER:+--haproxy-label "HAProxy $HAPROXY_VER"}
} >"$OUT"
cat "$OUT"
log "written to ${OUT#"$REPO_DIR"/}"
