#!/usr/bin/env bash
# Turnpike against nginx as a reverse proxy (bench/run.sh's case 2), in many short interleaved
# pairs, with more latency percentiles than run.sh reports. For the latency tail, where one
# disturbed round of a noisy machine decides a median of medians: the per-pair ratio, its
# median over all pairs, and in how many pairs turnpike did better.
# Method: docs/benchmarks.md ("Interleaved pairs").   Usage: bench/pairs.sh [--pairs N] [--duration S]
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$BENCH_DIR/.." && pwd)
CONFIGS=$BENCH_DIR/configs
# shellcheck source=common.sh
. "$BENCH_DIR/common.sh"
PAIRS=20
DURATION=10
TURNPIKE=${CARGO_TARGET_DIR:-$REPO_DIR/target}/release/turnpike
SUT_CPU=1    # the proxy under test
LOAD_CPU=0   # wrk and the nginx backend

usage() {
    cat <<EOF
usage: bench/pairs.sh [--pairs N] [--duration SECS] [--turnpike PATH]

  --pairs N          turnpike/nginx pairs, alternating (default $PAIRS)
  --duration SECS    length of each wrk run (default $DURATION)
  --turnpike PATH    the gateway binary (default target/release/turnpike)

Needs nginx, wrk, taskset and python3, and free ports 2001, 2010 and 2021 on 127.0.0.1.
EOF
}

while [[ $# -gt 0 ]]; do
    case $1 in
        --pairs) PAIRS=$2; shift 2 ;;
        --duration) DURATION=$2; shift 2 ;;
        --turnpike) TURNPIKE=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
done
[[ $PAIRS =~ ^[1-9][0-9]*$ ]] || { echo "--pairs must be a positive number" >&2; exit 2; }
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || { echo "--duration must be a positive number of seconds" >&2; exit 2; }
[[ -x $TURNPIKE ]] || { echo "no turnpike binary at $TURNPIKE (cargo build --release)" >&2; exit 2; }
for tool in nginx wrk taskset python3 curl; do
    command -v "$tool" >/dev/null || { echo "missing $tool (bench/install-deps.sh installs it)" >&2; exit 2; }
done
for port in 2001 2010 2021; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "port $port on 127.0.0.1 is taken; stop what listens there first" >&2
        exit 2
    fi
done

TMP=$(mktemp -d /tmp/turnpike-pairs.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

wait_ready() {  # URL: until it answers 200, at most 10 s
    bench_answers_200 "$1" || { echo "$1 did not answer" >&2; exit 1; }
}

# wrk's `done()` hook prints the percentiles of its latency histogram (in µs).
cat >"$TMP/percentiles.lua" <<'EOF'
done = function(summary, latency, requests)
  io.write(string.format("percentiles p50=%d p90=%d p99=%d p99.5=%d p99.9=%d\n",
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.5), latency:percentile(99.9)))
end
EOF

mkdir -p "$TMP/backend" "$TMP/nginx-proxy"
taskset -c $LOAD_CPU nginx -p "$TMP/backend/" -c "$CONFIGS/nginx-backend.conf" -e "$TMP/backend/error.log" &
PIDS+=($!)
wait_ready http://127.0.0.1:2010/

run_one() {  # NAME URL COMMAND...: start the proxy on the SUT CPU, load it, stop it
    local name=$1 url=$2
    shift 2
    taskset -c $SUT_CPU "$@" >"$TMP/$name.log" 2>&1 &
    local pid=$!
    wait_ready "$url"
    taskset -c $LOAD_CPU wrk -t1 -c50 -d1s "$url" >/dev/null
    local out
    out=$(taskset -c $LOAD_CPU wrk -t1 -c50 -d"${DURATION}s" -s "$TMP/percentiles.lua" "$url")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    local rps pct
    rps=$(awk '/Requests\/sec/{print $2}' <<<"$out")
    pct=$(grep '^percentiles' <<<"$out")
    echo "$name rps=$rps ${pct#percentiles }" | tee -a "$TMP/results"
}

for i in $(seq "$PAIRS"); do
    echo "[pairs] $i/$PAIRS" >&2
    run_one turnpike http://127.0.0.1:2001/ "$TURNPIKE" run -c "$CONFIGS/turnpike-proxy.yaml"
    run_one nginx http://127.0.0.1:2021/ nginx -p "$TMP/nginx-proxy/" -c "$CONFIGS/nginx-proxy.conf" \
        -e "$TMP/nginx-proxy/error.log"
done

python3 - "$TMP/results" <<'EOF'
import re, statistics, sys
runs = {"turnpike": [], "nginx": []}
for line in open(sys.argv[1]):
    name, rest = line.split(" ", 1)
    runs[name].append({k: float(v) for k, v in re.findall(r"([\w.]+)=([\d.]+)", rest)})
pairs = list(zip(runs["turnpike"], runs["nginx"]))
print(f"\n{len(pairs)} pairs; ratio = turnpike / nginx per pair\n")
print("| measure | median ratio | turnpike better in | turnpike median | nginx median |")
print("|---|--:|--:|--:|--:|")
for key in ["rps", "p50", "p90", "p99", "p99.5", "p99.9"]:
    ratios = [t[key] / n[key] for t, n in pairs]
    better = sum(1 for r in ratios if (r > 1 if key == "rps" else r < 1))
    unit = "" if key == "rps" else " µs"
    label = "req/s" if key == "rps" else key
    tm = statistics.median(t[key] for t, _ in pairs)
    nm = statistics.median(n[key] for _, n in pairs)
    print(f"| {label} | {statistics.median(ratios):.3f} | {better} of {len(pairs)} | {tm:,.0f}{unit} | {nm:,.0f}{unit} |")
EOF
