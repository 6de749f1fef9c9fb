# syntax=docker/dockerfile:1
# Turnpike API gateway.
#   docker build -t turnpike .
#   docker run -d --name turnpike -p 8080:8080 --stop-timeout 35 -v turnpike-store:/var/lib/turnpike turnpike
#   docker run ... -v "$PWD/conf":/etc/turnpike:ro turnpike        # your configuration instead of the example
# See docs/operations.md ("Docker").

# --- build ---------------------------------------------------------------------------------
# The toolchain must be at least the workspace's rust-version; some locked dependencies need a
# newer one.
ARG RUST_VERSION=1.95
FROM rust:${RUST_VERSION}-bookworm AS build

# What scripts/setup.sh installs to build: libxml2 headers, pkg-config and libclang for the
# `libxml` crate, libxslt headers for the `libxslt` crate, libxmlsec1 headers for the `xmlsec`
# crate, a C compiler for aws-lc and mimalloc, protoc for the etcd client. Versions are those of
# the Debian release (with its security updates).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      pkg-config libxml2-dev libxslt1-dev libxmlsec1-dev libclang-dev protobuf-compiler build-essential \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .
# The registry and target folders are build caches: the binary is copied out of them.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p turnpike \
 && install -m 0755 target/release/turnpike /usr/local/bin/turnpike

# --- runtime -------------------------------------------------------------------------------
FROM debian:bookworm-slim

# libxml2 (XML Schema validation; brings ICU, zlib, liblzma), libxslt (the `transform` policy's
# XSLT and EXSLT), libxmlsec1 with its OpenSSL engine (wsSecurity's XML Signature), the CA store
# (TLS to backends verifies against it by default). No curl: the health check speaks HTTP with
# bash.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libxml2 libxslt1.1 libxmlsec1 libxmlsec1-openssl ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 turnpike \
 && useradd --system --uid 10001 --gid turnpike --home-dir /var/lib/turnpike --no-create-home \
      --shell /usr/sbin/nologin turnpike \
 && install -d -m 0755 /etc/turnpike \
 && install -d -o turnpike -g turnpike -m 0750 /var/lib/turnpike

COPY --from=build /usr/local/bin/turnpike /usr/local/bin/turnpike
# An example configuration: the admin API on 127.0.0.1:9901 (health check), its store in
# /var/lib/turnpike, one API on port 8080. Mount your own folder on /etc/turnpike.
COPY --chmod=0644 packaging/turnpike.yaml /etc/turnpike/turnpike.yaml
# Makes the admin API's token (/var/lib/turnpike/admin.token, mode 0600) at the first start,
# then runs the binary with the container's arguments.
COPY --chmod=0755 packaging/docker-entrypoint /usr/local/bin/turnpike-entrypoint

# Documents created through the admin API (and, with etcd, the cached fleet configuration).
VOLUME ["/var/lib/turnpike"]

# 8080: the example API. 9901: the admin API, reachable from outside the container only when
# `admin.listen` is 0.0.0.0:9901 (with the names clients use in `admin.hosts`).
EXPOSE 8080 9901

USER 10001:10001
WORKDIR /var/lib/turnpike

# /healthz needs no token. Expects the admin listener on 127.0.0.1:9901 (or 0.0.0.0:9901)
# without TLS; otherwise override it (--health-cmd, or --no-healthcheck).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9901 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]

# SIGTERM drains for up to `gateway.timeouts.shutdown` (30 s by default): give `docker stop`
# more than that (--stop-timeout / -t, Compose `stop_grace_period`). SIGHUP reloads.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/turnpike-entrypoint"]
CMD ["run", "-c", "/etc/turnpike"]
