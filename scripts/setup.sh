#!/usr/bin/env bash
# Installs what Turnpike needs on a Debian machine, only what is missing.
#   scripts/setup.sh          build dependencies, then `cargo build --release`
#   scripts/setup.sh --test   build and test dependencies (tools, Python test peers); no build
# Needs root or sudo for apt-get, and a Rust toolchain (rustup) on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-build}
export DEBIAN_FRONTEND=noninteractive
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo

command -v cargo >/dev/null || {
  echo "setup: no Rust toolchain on PATH; install one with rustup (https://rustup.rs), then run this again" >&2
  exit 1
}

need=()
# Build: libxml2 headers, pkg-config and libclang for the `libxml` crate (XML Schema validation).
command -v pkg-config >/dev/null || need+=(pkg-config)
pkg-config --exists libxml-2.0 2>/dev/null || need+=(libxml2-dev)
# libxslt and libexslt headers for the `libxslt` crate (the `transform` policy's XSLT).
pkg-config --exists libxslt libexslt 2>/dev/null || need+=(libxslt1-dev)
# libxmlsec1 headers and xmlsec1-config for the `xmlsec` crate (wsSecurity's XML Signature).
pkg-config --exists xmlsec1-openssl 2>/dev/null || need+=(libxmlsec1-dev)
ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || need+=(libclang-dev)
# A C compiler also builds aws-lc, the TLS crypto provider (aws-lc-sys; no cmake needed).
command -v cc >/dev/null || need+=(build-essential)
# protoc compiles the etcd client's gRPC definitions (etcd-client's build script).
command -v protoc >/dev/null || need+=(protobuf-compiler)
if [ "$mode" = "--test" ]; then
  # Tests: curl (HTTP/2 and TLS client), openssl (test keys, PKCS#12), h2load, pgrep/pkill, CA roots,
  # xmllint (schema verdicts are compared with it), python3 + pip for the test peers, ss (the
  # benchmark harness's request count, tested by bench/test_benchlib.py).
  command -v curl >/dev/null || need+=(curl)
  command -v openssl >/dev/null || need+=(openssl)
  command -v h2load >/dev/null || need+=(nghttp2-client)
  command -v pkill >/dev/null || need+=(procps)
  [ -e /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
  command -v xmllint >/dev/null || need+=(libxml2-utils)
  command -v python3 >/dev/null || need+=(python3)
  command -v ss >/dev/null || need+=(iproute2)
  # Slow-client attacks (slowloris, slow body, slow read) against the gateway's timeouts.
  command -v slowhttptest >/dev/null || need+=(slowhttptest)
  # The fleet tests start real etcd servers and drive them with etcdctl.
  command -v etcd >/dev/null || need+=(etcd-server)
  command -v etcdctl >/dev/null || need+=(etcd-client)
  # Rate limits and response caches shared through Redis (a standalone server, a cluster, a Sentinel: redis-server --sentinel).
  command -v redis-server >/dev/null || need+=(redis-server)
  command -v redis-cli >/dev/null || need+=(redis-tools)
  # Admin API changes under load (wrk).
  command -v wrk >/dev/null || need+=(wrk)
  # The web console test drives Debian's Chromium through ChromeDriver (selenium).
  command -v chromium >/dev/null || need+=(chromium)
  command -v chromedriver >/dev/null || need+=(chromium-driver)
  # cargo fuzz builds libFuzzer (C++).
  command -v c++ >/dev/null || need+=(g++)
  python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${need[@]}"
fi

if [ "$mode" = "--test" ]; then
  # Python peers the tests talk to: websockets, grpcio (+ tools), schemathesis, spyne, zeep.
  python3 -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages -r tests/requirements.txt
  # pyenv only exposes newly installed commands (schemathesis) after a rehash.
  if command -v pyenv >/dev/null; then pyenv rehash; fi
else
  cargo build --release --locked -p turnpike
fi

if [ "$mode" != "--test" ] && python3 -m pip --version >/dev/null 2>&1; then
  # The `turnpike_policy` package that `python` policies are written with.
  python3 -m pip install --quiet --disable-pip-version-check ./python \
    || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages ./python
fi
