# Shell functions the benchmark scripts share (sourced by run.sh, pairs.sh and together.sh).

# bench_make_pki DIR: a CA and a server certificate for localhost and 127.0.0.1 signed by it,
# valid for two days: DIR/ca.pem, DIR/server.pem, DIR/server.key.
bench_make_pki() {
    local pki=$1
    mkdir -p "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=Turnpike bench CA" \
        -keyout "$pki/ca.key" -out "$pki/ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$pki/server.key" \
        -out "$pki/server.csr" 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$pki/ext.cnf"
    openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial \
        -days 2 -extfile "$pki/ext.cnf" -out "$pki/server.pem" 2>/dev/null
}

# bench_fill_template SRC PKI BODY: prints SRC with @PKI@ and @BODY@ filled in.
bench_fill_template() {
    sed -e "s|@PKI@|$2|g" "$1" | awk -v body="$3" '{gsub(/@BODY@/, body); print}'
}

# bench_backend_body CONFIGS: the JSON body the plain nginx backend returns.
bench_backend_body() {
    sed -n "s/^ *return 200 '\({.*\)';$/\1/p" "$1/nginx-backend.conf" | head -n 1
}

# bench_answers_200 URL: waits until URL answers 200 (certificates not checked), at most 10 s.
# Returns 1 if it never does.
bench_answers_200() {
    local _
    for _ in $(seq 100); do
        [[ $(curl -sk -o /dev/null -w '%{http_code}' "$1" || true) == 200 ]] && return 0
        sleep 0.1
    done
    return 1
}

# sleep_until EXPR: sleeps until the time EXPR (seconds since the epoch, an awk expression,
# e.g. "$started + 1"); returns at once if that time has passed.
sleep_until() { sleep "$(awk -v now="$(date +%s.%N)" "BEGIN { d = $1 - now; print (d > 0 ? d : 0) }")"; }
