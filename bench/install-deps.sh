#!/usr/bin/env bash
# Installs what bench/run.sh and its suites (bench/suite.py) need (Debian/Ubuntu). Run as root or
# with sudo.
#   bench/install-deps.sh               nginx, wrk, HAProxy, Caddy, h2load, openssl, ..., and
#                                       matplotlib (pip) for the suites' charts
#   bench/install-deps.sh --with-pingap also Pingap, built from crates.io with cargo (needs a
#                                       Rust toolchain and protoc; takes several minutes)
set -euo pipefail
WITH_PINGAP=0
for a in "$@"; do
    case $a in
        --with-pingap) WITH_PINGAP=1 ;;
        -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
        *) echo "install-deps.sh: unknown option $a (see --help)" >&2; exit 2 ;;
    esac
done
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
if apt-cache show nginx-light >/dev/null 2>&1; then NGINX=nginx-light; else NGINX=nginx; fi
# The packages' own services are not used by the harness (it starts private instances with
# their own configs on 127.0.0.1:2000-2099). nghttp2-client brings h2load, the suites' load
# generator; caddy is one of the suites' peers.
$SUDO apt-get install -y "$NGINX" wrk haproxy caddy nghttp2-client openssl curl util-linux \
    procps iproute2 python3 python3-pip
# The charts of the suites' reports.
python3 -m pip install --quiet matplotlib \
    || python3 -m pip install --quiet --break-system-packages matplotlib

if ((WITH_PINGAP)); then
    # Pingap, the Pingora-based gateway, from crates.io; its build compiles protobuf files and
    # zlib-ng (with cmake).
    $SUDO apt-get install -y protobuf-compiler cmake
    command -v cargo >/dev/null || {
        echo "install-deps.sh: --with-pingap needs cargo (a Rust toolchain, e.g. from rustup)" >&2
        exit 1
    }
    # The newest Pingap may need a newer rustc than the one installed: cargo then names the
    # newest release this toolchain builds, which is installed instead.
    if ! out=$(cargo install pingap --locked 2>&1); then
        older=$(sed -n 's/.*`pingap \([0-9.]*\)` supports rustc.*/\1/p' <<<"$out" | head -1)
        [[ -n "$older" ]] || { echo "$out" >&2; exit 1; }
        echo "install-deps.sh: the newest Pingap needs a newer rustc; installing Pingap $older"
        cargo install pingap --version "$older" --locked
    fi
    echo "Pingap installed: $(command -v pingap || echo "$HOME/.cargo/bin/pingap")"
fi
