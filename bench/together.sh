#!/usr/bin/env bash
# Two turnpike setups measured at the same time: both run on the gateway CPU, each in its own
# cgroup with a CPU quota, each loaded by its own wrk on the load CPU, against the same
# backends. Each round reports both setups' CPU per request from the same seconds of the
# machine, so the noise that moves sequential runs by several µs per request mostly cancels
# in their ratio. The two setups swap ports every round, and the report takes out the ports'
# bias. Method: docs/benchmarks.md ("Simultaneous A/B: bench/together.sh"); results measured
# with it are in its "Results" and "Measurements behind design choices" sections.
#   Usage: bench/together.sh --help
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$BENCH_DIR/.." && pwd)
CONFIGS=$BENCH_DIR/configs
LIB=$BENCH_DIR/benchlib.py
# shellcheck source=common.sh
. "$BENCH_DIR/common.sh"
ROUNDS=8
DURATION=7
SETTLE=1     # seconds of each round's load before the measured window
TAIL=1       # and after it
CONNECTIONS=50
QUOTA=20
PERIOD_US=10000
DEFAULT_BIN=${CARGO_TARGET_DIR:-$REPO_DIR/target}/release/turnpike
A_SETUP="" B_SETUP="" A_BIN=$DEFAULT_BIN B_BIN=$DEFAULT_BIN A_SPIN=0 B_SPIN=0
SUT_CPU=1    # both gateways
LOAD_CPU=0   # both wrk processes and the nginx backends
PORTS=(2051 2052)

usage() {
    cat <<EOF
usage: bench/together.sh --a SETUP --b SETUP [options]

SETUP is one of:
  plain        HTTP from clients, HTTP to the backend (nginx on 2010)
  tls          TLS on both hops (the TLS backend on 2012)
  tls-clients  TLS from clients, HTTP to the backend

  --a-bin PATH, --b-bin PATH   turnpike binary of each side (default $DEFAULT_BIN)
  --a-spin N, --b-spin N       that side's wrk runs configs/slow-loader.lua with SPIN=N: busy
                               work on the load CPU for every response (0: plain wrk)
  --rounds N                   rounds (default $ROUNDS); the sides swap ports every round
  --duration SECS              length of each round's load (default $DURATION); the measured
                               window leaves out its first ${SETTLE} s (connections and TLS
                               handshakes) and its last ${TAIL} s
  --connections C              wrk connections per side (default $CONNECTIONS)
  --quota PCT                  each gateway's share of the gateway CPU (default $QUOTA)

Prints, per round and as medians, each side's CPU µs per request and sleeps per request, and
the ratio B/A, over keep-alive traffic: requests are counted on the gateway's sockets
(data_segs_in from ss) and CPU from the threads' schedstat, both inside the window.
Needs root (cgroups), nginx, wrk, taskset, curl, openssl, python3 and ss (iproute2), and free
ports 2010, 2012, ${PORTS[0]} and ${PORTS[1]} on 127.0.0.1.
With KEEP_TMP=1 in the environment, the run's folder (configs, logs, wrk output, snapshots)
is kept in /tmp.
EOF
}

die() { printf 'bench/together.sh: %s\n' "$*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
    case $1 in
        --a) A_SETUP=$2; shift 2 ;;
        --b) B_SETUP=$2; shift 2 ;;
        --a-bin) A_BIN=$2; shift 2 ;;
        --b-bin) B_BIN=$2; shift 2 ;;
        --a-spin) A_SPIN=$2; shift 2 ;;
        --b-spin) B_SPIN=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --duration) DURATION=$2; shift 2 ;;
        --connections) CONNECTIONS=$2; shift 2 ;;
        --quota) QUOTA=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option: $1" ;;
    esac
done
for s in "$A_SETUP" "$B_SETUP"; do
    [[ $s == plain || $s == tls || $s == tls-clients ]] || die "--a and --b take plain, tls or tls-clients (got '$s')"
done
for n in "$ROUNDS" "$DURATION" "$CONNECTIONS" "$QUOTA"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "--rounds, --duration, --connections and --quota take positive numbers"
done
((DURATION >= 3)) || die "--duration: at least 3 s (1 s to connect, then the measured window)"
[[ $A_SPIN =~ ^[0-9]+$ && $B_SPIN =~ ^[0-9]+$ ]] || die "--a-spin and --b-spin take a number"
((QUOTA * 2 <= 100)) || die "--quota: two gateways share one CPU, so at most 50"
for b in "$A_BIN" "$B_BIN"; do [[ -x $b ]] || die "no turnpike binary at $b (cargo build --release)"; done
for tool in nginx wrk taskset curl openssl python3 ss; do
    command -v "$tool" >/dev/null || die "missing $tool (bench/install-deps.sh installs it)"
done
[[ -d /sys/fs/cgroup/cpu ]] || die "needs the cgroup v1 CPU controller under /sys/fs/cgroup/cpu (and root)"
python3 "$LIB" ports-free 2010 2012 "${PORTS[@]}" >/dev/null || die "a port is taken: 2010, 2012, ${PORTS[*]}"

TMP=$(mktemp -d /tmp/turnpike-together.XXXXXX)
PIDS=()
CGS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    for cg in "${CGS[@]}"; do rmdir "$cg" 2>/dev/null || true; done
    [[ -n ${KEEP_TMP:-} ]] || rm -rf "$TMP"
}
trap cleanup EXIT

wait_ready() { bench_answers_200 "$1" || die "$1 did not answer"; }

# The certificates of the run, the TLS backend's config, and (below) the gateway configs with
# their API's port replaced.
PKI=$TMP/pki
bench_make_pki "$PKI"
bench_fill_template "$CONFIGS/nginx-tls-backend.conf.in" "$PKI" "$(bench_backend_body "$CONFIGS")" \
    >"$TMP/nginx-tls-backend.conf"

config() {  # config SETUP PORT: writes the gateway config, prints its path and URL
    local setup=$1 port=$2 src scheme=https
    case $setup in
        plain) src=$CONFIGS/turnpike-proxy.yaml; scheme=http ;;
        tls) src=$CONFIGS/turnpike-tls.yaml.in ;;
        tls-clients) src=$CONFIGS/turnpike-tls-clients.yaml.in ;;
    esac
    # The API's own port is the first `port:` at two spaces (the target's is deeper).
    sed -e "s|@PKI@|$PKI|g" -e "0,/^  port: [0-9]*$/s//  port: $port/" "$src" >"$TMP/$setup-$port.yaml"
    echo "$TMP/$setup-$port.yaml $scheme://127.0.0.1:$port/"
}

mkdir -p "$TMP/backend" "$TMP/tls-backend"
taskset -c $LOAD_CPU nginx -p "$TMP/backend/" -c "$CONFIGS/nginx-backend.conf" -e "$TMP/backend/error.log" &
PIDS+=($!)
taskset -c $LOAD_CPU nginx -p "$TMP/tls-backend/" -c "$TMP/nginx-tls-backend.conf" -e "$TMP/tls-backend/error.log" &
PIDS+=($!)
wait_ready http://127.0.0.1:2010/
wait_ready https://127.0.0.1:2012/

for side in a b; do
    cg=/sys/fs/cgroup/cpu/turnpike-together-$$-$side
    mkdir "$cg" || die "cannot create the cgroup $cg (needs root)"
    CGS+=("$cg")
    echo $PERIOD_US >"$cg/cpu.cfs_period_us"
    echo $((PERIOD_US * QUOTA / 100)) >"$cg/cpu.cfs_quota_us"
done

side_setup() { if [[ $1 == a ]]; then echo "$A_SETUP"; else echo "$B_SETUP"; fi; }
side_bin() { if [[ $1 == a ]]; then echo "$A_BIN"; else echo "$B_BIN"; fi; }
side_spin() { if [[ $1 == a ]]; then echo "$A_SPIN"; else echo "$B_SPIN"; fi; }

for round in $(seq "$ROUNDS"); do
    declare -A pid=() url=() port=()
    if ((round % 2)); then port[a]=${PORTS[0]}; port[b]=${PORTS[1]}; else port[a]=${PORTS[1]}; port[b]=${PORTS[0]}; fi
    for side in a b; do
        read -r cfg u < <(config "$(side_setup $side)" "${port[$side]}")
        url[$side]=$u
        sh -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' sh "/sys/fs/cgroup/cpu/turnpike-together-$$-$side" \
            taskset -c $SUT_CPU "$(side_bin $side)" run -c "$cfg" >"$TMP/$side.log" 2>&1 &
        pid[$side]=$!
        PIDS+=("${pid[$side]}")
    done
    for side in a b; do wait_ready "${url[$side]}"; done
    # Warm both (connections, pools), then measure both at once.
    warm=()
    for side in a b; do
        taskset -c $LOAD_CPU wrk -t1 -c"$CONNECTIONS" -d1s "${url[$side]}" >/dev/null &
        warm+=($!)
    done
    wait "${warm[@]}"
    wrks=()
    for side in a b; do
        spin=$(side_spin $side)
        script=()
        ((spin > 0)) && script=(-s "$CONFIGS/slow-loader.lua")
        SPIN=$spin taskset -c $LOAD_CPU wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency "${script[@]}" "${url[$side]}" \
            >"$TMP/$side.wrk" &
        wrks+=($!)
    done
    # The measured window: from SETTLE s after wrk starts (its connections are open and
    # their TLS handshakes done) to TAIL s before it stops. Each snapshot counts the
    # requests received on the side's port so far, so per-request figures cover
    # keep-alive traffic only.
    started=$(date +%s.%N)
    sleep_until "$started + $SETTLE"
    for side in a b; do python3 "$LIB" proctree "${pid[$side]}" --port "${port[$side]}" >"$TMP/$side.before"; done
    sleep_until "$started + $DURATION - $TAIL"
    for side in a b; do python3 "$LIB" proctree "${pid[$side]}" --port "${port[$side]}" >"$TMP/$side.after"; done
    wait "${wrks[@]}"
    for side in a b; do
        python3 "$LIB" record --round "$round" --case together --system "$side" --url "${url[$side]}" \
            --duration "$DURATION" --wrk "$TMP/$side.wrk" --before "$TMP/$side.before" \
            --after "$TMP/$side.after" | python3 -c "
import json, sys
r = json.load(sys.stdin); r['port'] = ${port[$side]}
print(json.dumps(r))" >>"$TMP/runs.jsonl"
    done
    for side in a b; do kill "${pid[$side]}"; wait "${pid[$side]}" 2>/dev/null || true; done
    echo "[together] round $round/$ROUNDS done" >&2
done

A_LABEL="A: $A_SETUP$( ((A_SPIN > 0)) && echo ", load SPIN=$A_SPIN") ($(basename "$A_BIN"))"
B_LABEL="B: $B_SETUP$( ((B_SPIN > 0)) && echo ", load SPIN=$B_SPIN") ($(basename "$B_BIN"))"
python3 - "$TMP/runs.jsonl" "$A_LABEL" "$B_LABEL" "${PORTS[0]}" <<'EOF'
import json, statistics, sys
runs, a_label, b_label, first_port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
by_round = {}
for line in open(runs):
    r = json.loads(line)
    by_round.setdefault(r["round"], {})[r["system"]] = r
print(f"{a_label}\n{b_label}\n")
print("| round | A on port | A CPU µs/req | A sleeps/req | B CPU µs/req | B sleeps/req | B/A | B − A µs |")
print("|--:|--:|--:|--:|--:|--:|--:|--:|")
ratios, diffs = [], {True: [], False: []}
for n in sorted(by_round):
    a, b = by_round[n]["a"], by_round[n]["b"]
    ca, cb = a["cpu_us_per_req"], b["cpu_us_per_req"]
    ratios.append(cb / ca)
    diffs[a["port"] == first_port].append(cb - ca)
    print(f"| {n} | {a['port']} | {ca:.2f} | {a['sleeps_per_req']:.3f} | {cb:.2f} | "
          f"{b['sleeps_per_req']:.3f} | {cb / ca:.3f} | {cb - ca:+.2f} |")
med = statistics.median
print(f"\nB/A, median of {len(ratios)} rounds: {med(ratios):.3f} (range {min(ratios):.3f}–{max(ratios):.3f})")
a_med = med(by_round[n]["a"]["cpu_us_per_req"] for n in by_round)
b_med = med(by_round[n]["b"]["cpu_us_per_req"] for n in by_round)
print(f"CPU µs/req, medians: A {a_med:.2f}, B {b_med:.2f}")
if diffs[True] and diffs[False]:
    # The same difference measured from both ports: their mean cancels the ports' bias.
    d1, d2 = statistics.mean(diffs[True]), statistics.mean(diffs[False])
    print(f"B − A with the ports' bias taken out: {(d1 + d2) / 2:+.2f} µs per request "
          f"(A on {first_port}: {d1:+.2f}, A on the other port: {d2:+.2f})")
EOF
