#!/usr/bin/env bash
# Installs what bench/run.sh needs (Debian/Ubuntu). Run as root or with sudo.
set -euo pipefail
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
if apt-cache show nginx-light >/dev/null 2>&1; then NGINX=nginx-light; else NGINX=nginx; fi
# The packages' own services are not used by the harness (it starts private
# instances with their own configs on 127.0.0.1:2000-2099).
$SUDO apt-get install -y "$NGINX" wrk haproxy curl util-linux procps iproute2 python3
