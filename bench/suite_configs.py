"""Configs of bench/suite.py's generated cases, for every system (standard library only).

The membrane suite uses the hand-written configs in bench/configs/ (some of them templates,
filled in by `fill`). The apisix and wso2 suites are matrices (routes x plugins x backends,
worker threads), so their configs are generated here, one function per system:

  apisix(system, routes, plugins, backend, ctx)   routes 1 or 100; plugins none, key, limit,
                                                  both; backend mock or real
  wso2(system, threads, ctx)                      one API with 8 routes, N worker threads

Each returns {file name: text}; the first file is the one the system is started with. `ctx` is a
Ctx: the run's folder (configs that name other files use absolute paths in it) and the JSON body
of the backend, which the mocked cases answer with themselves. A system that cannot express a
case raises NotExpressible with the reason, which the report prints in place of figures.

`python3 bench/suite.py configs --out DIR` writes every generated config to DIR for reading.
"""
import os
import re
from collections import namedtuple

import gen_policy_configs as gpc

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "configs")

APISIX_PORT = 2080
WSO2_PORT = 2081
BACKEND_PORT = 2010
CONSUMERS = 100
WSO2_ROUTES = 8
# APISIX's limit-count in its benchmark: a count no load reaches within its window.
LIMIT_COUNT = 999999999
LIMIT_WINDOW_S = 60

Ctx = namedtuple("Ctx", "tmp body")


class NotExpressible(Exception):
    """The system cannot express the case; the message says why."""


def backend_body(configs=CONFIGS):
    """The JSON body the plain nginx backend returns (its `location /`)."""
    with open(os.path.join(configs, "nginx-backend.conf")) as f:
        for line in f:
            m = re.match(r"^\s*return 200 '(\{.*\})';\s*$", line)
            if m:
                return m.group(1)
    raise SystemExit("bench: no JSON body in configs/nginx-backend.conf")


def fill(text, **values):
    """`text` with every @NAME@ replaced by values[name.lower()]."""
    def sub(m):
        key = m.group(1).lower()
        if key not in values:
            raise KeyError("no value for @%s@" % m.group(1))
        return str(values[key])
    return re.sub(r"@([A-Z]+)@", sub, text)


def key_of(i):
    return "key-%03d" % i


def consumer_of(i):
    return "consumer-%03d" % i


def route_of(i):
    return "/api%03d/" % i


def wso2_route(i):
    return "/svc/r%d/" % (i + 1)


# ------------------------------------------------------------------ turnpike


def _tp_head(threads):
    return "gateway:\n  threads: %d\n  accessLog: false\n" % threads


def turnpike_apisix(routes, plugins, backend, ctx):
    flow = "".join(turnpike_flow(p) for p in {"none": [], "key": ["key"], "limit": ["limit"],
                                               "both": ["key", "limit"]}[plugins])
    if backend == "mock":
        flow += ("    - return:\n        status: 200\n        contentType: application/json\n"
                 "        body: '%s'\n" % ctx.body)
    out = [_tp_head(1)]
    if plugins in ("key", "both"):
        out.append(gpc.CONSUMERS)
    for i in range(routes):
        out.append("---\napi:\n  port: %d\n  ip: 127.0.0.1\n  path: { uri: %s }\n"
                   % (APISIX_PORT, route_of(i)))
        if flow:
            out.append("  flow:\n" + flow)
        if backend == "real":
            out.append(gpc.BACKEND)
    return {"turnpike.yaml": "".join(out)}


def turnpike_flow(plugins):
    if plugins == "key":
        return gpc.API_KEY
    if plugins == "limit":
        return ("    - rateLimiter:\n        requestLimit: %d\n"
                "        requestLimitDuration: PT%dS\n" % (LIMIT_COUNT, LIMIT_WINDOW_S))
    return ""


def turnpike_wso2(threads, ctx):
    out = [_tp_head(threads)]
    for i in range(WSO2_ROUTES):
        out.append("---\napi:\n  port: %d\n  ip: 127.0.0.1\n  path: { uri: %s }\n%s"
                   % (WSO2_PORT, wso2_route(i), gpc.BACKEND))
    return {"turnpike.yaml": "".join(out)}


# --------------------------------------------------------------------- nginx

_NGINX_HEAD = """daemon off;
master_process on;
worker_processes %d;
pid nginx.pid;
error_log error.log warn;

events {
    worker_connections 8192;
}

http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    client_body_temp_path client_body;
    proxy_temp_path proxy;
    fastcgi_temp_path fastcgi;
    uwsgi_temp_path uwsgi;
    scgi_temp_path scgi;
    open_file_cache max=16 inactive=1h;
    open_file_cache_valid 1h;

    upstream backend {
        server 127.0.0.1:%d;
        keepalive %d;
        keepalive_requests 1000000;
    }
"""

_NGINX_PROXY = """            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
"""


def nginx_apisix(routes, plugins, backend, ctx):
    out = [_NGINX_HEAD % (1, BACKEND_PORT, 256)]
    files = {}
    if plugins in ("key", "both"):
        out.append("    map $http_x_api_key $consumer {\n        default \"\";\n")
        out.extend("        %s %s;\n" % (key_of(i), consumer_of(i)) for i in range(CONSUMERS))
        out.append("    }\n")
    if plugins in ("limit", "both"):
        # A leaky bucket, not a count per window: nginx has no fixed-window counter. Its rate
        # and burst are far above the load, so nothing is refused, as with APISIX's count.
        out.append("    limit_req_zone $binary_remote_addr zone=per_ip:10m rate=1000000r/s;\n")
    out.append("\n    server {\n        listen 127.0.0.1:%d;\n" % APISIX_PORT)
    for i in range(routes):
        out.append("        location %s {\n" % route_of(i))
        if plugins in ("key", "both"):
            out.append("            if ($consumer = \"\") { return 401; }\n")
        if plugins in ("limit", "both"):
            out.append("            limit_req zone=per_ip burst=100000 nodelay;\n")
        if backend == "mock":
            # `return` runs before limit_req and the access phase, so the mocked backend is a
            # static file (cached open), served after both.
            out.append("            default_type application/json;\n"
                       "            root %s;\n            try_files /mock-body.json =500;\n"
                       % ctx.tmp)
        else:
            out.append(_NGINX_PROXY)
        out.append("        }\n")
    out.append("    }\n}\n")
    if backend == "mock":
        files["mock-body.json"] = ctx.body
    return dict({"nginx.conf": "".join(out)}, **files)


def nginx_wso2(threads, ctx):
    out = [_NGINX_HEAD % (threads, BACKEND_PORT, 1024),
           "\n    server {\n        listen 127.0.0.1:%d;\n" % WSO2_PORT]
    for i in range(WSO2_ROUTES):
        out.append("        location %s {\n%s        }\n" % (wso2_route(i), _NGINX_PROXY))
    out.append("    }\n}\n")
    return {"nginx.conf": "".join(out)}


# ------------------------------------------------------------------- HAProxy

_HAPROXY_HEAD = """global
    nbthread %d
    maxconn 8000

defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 30s
    timeout server 30s

backend be_backend
    server backend1 127.0.0.1:%d
"""


def haproxy_apisix(routes, plugins, backend, ctx):
    out = [_HAPROXY_HEAD % (1, BACKEND_PORT)]
    files = {}
    if plugins in ("limit", "both"):
        out.append("\nbackend st_per_ip\n    stick-table type ip size 100k expire %ds "
                   "store http_req_rate(%ds)\n" % (LIMIT_WINDOW_S, LIMIT_WINDOW_S))
    out.append("\nfrontend fe_bench\n    bind 127.0.0.1:%d\n" % APISIX_PORT)
    # One line per route (a line takes at most 64 words); lines of one ACL name are or'ed.
    out.extend("    acl known_route path_beg %s\n" % route_of(i) for i in range(routes))
    out.append("    http-request deny deny_status 404 unless known_route\n")
    if plugins in ("key", "both"):
        files["keys.map"] = "".join("%s %s\n" % (key_of(i), consumer_of(i))
                                    for i in range(CONSUMERS))
        out.append("    http-request set-var(txn.consumer) req.hdr(x-api-key),map(%s/keys.map)\n"
                   "    http-request deny deny_status 401 unless { var(txn.consumer) -m found }\n"
                   % ctx.tmp)
    if plugins in ("limit", "both"):
        out.append("    http-request track-sc0 src table st_per_ip\n"
                   "    http-request deny deny_status 429 if { sc_http_req_rate(0) gt %d }\n"
                   % LIMIT_COUNT)
    if backend == "mock":
        files["mock-body.json"] = ctx.body
        out.append("    http-request return status 200 content-type application/json "
                   "file %s/mock-body.json\n" % ctx.tmp)
    out.append("    default_backend be_backend\n")
    return dict({"haproxy.cfg": "".join(out)}, **files)


def haproxy_wso2(threads, ctx):
    out = [_HAPROXY_HEAD % (threads, BACKEND_PORT),
           "\nfrontend fe_bench\n    bind 127.0.0.1:%d\n" % WSO2_PORT,
           "".join("    acl known_route path_beg %s\n" % wso2_route(i)
                   for i in range(WSO2_ROUTES)),
           "    http-request deny deny_status 404 unless known_route\n"
           "    default_backend be_backend\n"]
    return {"haproxy.cfg": "".join(out)}


# --------------------------------------------------------------------- Caddy

_CADDY_HEAD = "{\n\tadmin off\n\tauto_https off\n}\n\nhttp://:%d {\n\tbind 127.0.0.1\n"
_CADDY_PROXY = ("reverse_proxy 127.0.0.1:%d {\n\t\ttransport http {\n\t\t\tkeepalive 75s\n"
                "\t\t\tkeepalive_idle_conns 4096\n\t\t\tkeepalive_idle_conns_per_host %d\n"
                "\t\t}\n\t}")


def _indent(text, tabs):
    return "".join("\t" * tabs + line if line.strip() else line
                   for line in text.splitlines(True))


def caddy_apisix(routes, plugins, backend, ctx):
    if plugins in ("limit", "both"):
        raise NotExpressible("Caddy has no rate limiter in its standard build "
                             "(only the third-party caddy-ratelimit module)")
    out = [_CADDY_HEAD % APISIX_PORT]
    if plugins == "key":
        out.append("\tmap {header.X-Api-Key} {consumer} {\n")
        out.extend("\t\t%s %s\n" % (key_of(i), consumer_of(i)) for i in range(CONSUMERS))
        out.append("\t\tdefault _none_\n\t}\n\t@anonymous vars {consumer} _none_\n")
    if backend == "mock":
        handler = "header Content-Type application/json\nrespond `%s` 200\n" % ctx.body
    else:
        handler = (_CADDY_PROXY % (BACKEND_PORT, 256)).replace("\n\t", "\n") + "\n"
    if plugins == "key":
        handler = "respond @anonymous 401\n" + handler
    for i in range(routes):
        out.append("\thandle %s* {\n\t\troute {\n%s\t\t}\n\t}\n" % (route_of(i), _indent(handler, 3)))
    out.append("\thandle {\n\t\trespond 404\n\t}\n}\n")
    return {"Caddyfile": "".join(out)}


def caddy_wso2(threads, ctx):
    out = [_CADDY_HEAD % WSO2_PORT]
    proxy = (_CADDY_PROXY % (BACKEND_PORT, 1024)).replace("\n\t", "\n") + "\n"
    for i in range(WSO2_ROUTES):
        out.append("\thandle %s* {\n%s\t}\n" % (wso2_route(i), _indent(proxy, 2)))
    out.append("\thandle {\n\t\trespond 404\n\t}\n}\n")
    return {"Caddyfile": "".join(out)}


# -------------------------------------------------------------------- Pingap


def _toml_str(s):
    return "'%s'" % s if "'" not in s else '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


def _pingap_head(ctx, threads, pool):
    return ('[basic]\npid_file = "%s/pingap.pid"\nupgrade_sock = "%s/pingap.sock"\nthreads = %d\n'
            'upstream_keepalive_pool_size = %d\nlog_level = "warn"\n'
            # Stop within a second of SIGTERM (Pingora waits 5 minutes by default).
            'grace_period = "1s"\ngraceful_shutdown_timeout = "1s"\n\n'
            '[upstreams.backend]\naddrs = ["127.0.0.1:%d"]\n'
            % (ctx.tmp, ctx.tmp, threads, pool, BACKEND_PORT))


def pingap_apisix(routes, plugins, backend, ctx):
    out = [_pingap_head(ctx, 1, 256)]
    names = []
    if plugins in ("key", "both"):
        names.append("keyAuth")
        out.append('\n[plugins.keyAuth]\ncategory = "key_auth"\nheader = "X-Api-Key"\nkeys = [%s]\n'
                   % ", ".join('"%s"' % key_of(i) for i in range(CONSUMERS)))
    if plugins in ("limit", "both"):
        # Pingap divides max by the interval's seconds and compares with a sliding estimate.
        names.append("perIpLimit")
        out.append('\n[plugins.perIpLimit]\ncategory = "limit"\ntype = "rate"\ntag = "ip"\n'
                   'max = %d\ninterval = "%ds"\n' % (LIMIT_COUNT * LIMIT_WINDOW_S, LIMIT_WINDOW_S))
    if backend == "mock":
        names.append("mockBody")
        out.append('\n[plugins.mockBody]\ncategory = "mock"\nstatus = 200\n'
                   'headers = ["Content-Type: application/json"]\ndata = %s\n' % _toml_str(ctx.body))
    for i in range(routes):
        out.append('\n[locations.api%03d]\nupstream = "backend"\npath = "%s"\n' % (i, route_of(i)))
        if names:
            out.append("plugins = [%s]\n" % ", ".join('"%s"' % n for n in names))
    out.append('\n[servers.bench]\naddr = "127.0.0.1:%d"\nlocations = [%s]\nthreads = 1\n'
               % (APISIX_PORT, ", ".join('"api%03d"' % i for i in range(routes))))
    return {"pingap.toml": "".join(out)}


def pingap_wso2(threads, ctx):
    out = [_pingap_head(ctx, threads, 1024)]
    for i in range(WSO2_ROUTES):
        out.append('\n[locations.r%d]\nupstream = "backend"\npath = "%s"\n' % (i + 1, wso2_route(i)))
    out.append('\n[servers.bench]\naddr = "127.0.0.1:%d"\nlocations = [%s]\nthreads = %d\n'
               % (WSO2_PORT, ", ".join('"r%d"' % (i + 1) for i in range(WSO2_ROUTES)), threads))
    return {"pingap.toml": "".join(out)}


APISIX = {"turnpike": turnpike_apisix, "nginx": nginx_apisix, "haproxy": haproxy_apisix,
          "caddy": caddy_apisix, "pingap": pingap_apisix}
WSO2 = {"turnpike": turnpike_wso2, "nginx": nginx_wso2, "haproxy": haproxy_wso2,
        "caddy": caddy_wso2, "pingap": pingap_wso2}


def apisix(system, routes, plugins, backend, ctx):
    return APISIX[system](routes, plugins, backend, ctx)


def wso2(system, threads, ctx):
    return WSO2[system](threads, ctx)
