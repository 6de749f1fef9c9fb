#!/usr/bin/env python3
"""The benchmark suites: Membrane's seven scenarios, APISIX's route and plugin matrix and WSO2's
8 routes at 1,000 connections, each run with turnpike and its peers (nginx, HAProxy, Caddy,
Pingap) side by side, with a Markdown report and PNG charts. Method and results:
docs/benchmarks.md ("Suites").

  bench/run.sh --suite membrane|apisix|wso2|all [--quick] [options]   (runs this file)
  bench/suite.py run --suite ... [options]        the same
  bench/suite.py run --suite smoke                one short case per suite, for CI
  bench/suite.py configs --out DIR                write the generated configs of every case
  bench/suite.py report DIR                       rebuild DIR's report and charts from its runs

Standard library only, except the charts (matplotlib; without it the report says so).
"""
import argparse
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import namedtuple

import benchlib
import gen_policy_configs
import suite_configs as sc
import suite_report

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CONFIGS = sc.CONFIGS
COMMON_SH = os.path.join(HERE, "common.sh")

SUT_CPU = "1"        # the system under test
LOAD_CPU = "0"       # h2load and the backends
ALL_CPUS = "0-1"
SYSTEMS = ["turnpike", "nginx", "haproxy", "caddy", "pingap"]
SUITES = ["membrane", "apisix", "wso2"]

# Lengths of a run. membrane: a fixed number of requests after an uncounted warm-up of the
# same concurrency; apisix and wso2: h2load's -D seconds after --warm-up-time seconds.
PROFILES = {
    "full": {"membrane": {"requests": 300000, "warmup": 30000, "rounds": 5},
             "apisix": {"duration": 6, "warmup": 1, "rounds": 3},
             "wso2": {"duration": 20, "warmup": 5, "rounds": 3}},
    "quick": {"membrane": {"requests": 100000, "warmup": 10000, "rounds": 1},
              "apisix": {"duration": 3, "warmup": 1, "rounds": 1},
              "wso2": {"duration": 4, "warmup": 1, "rounds": 1}},
    "smoke": {"membrane": {"requests": 5000, "warmup": 500, "rounds": 1},
              "apisix": {"duration": 2, "warmup": 1, "rounds": 1},
              "wso2": {"duration": 2, "warmup": 1, "rounds": 1}},
}
APISIX_CONNECTIONS = 50
WSO2_CONNECTIONS = 1000
BASIC = "Authorization: Basic bG9hZHRlc3Q6c2VjcmV0"   # loadtest:secret
API_KEY = "X-Api-Key: key-042"


def log(msg):
    sys.stderr.write("[suite] %s\n" % msg)
    sys.stderr.flush()


def die(msg):
    sys.stderr.write("bench/suite.py: error: %s\n" % msg)
    sys.exit(1)


# ----------------------------------------------------------------- the plan
#
# A Run is one system serving one case. `kind` picks the command line (see Bench.command);
# `config` is a file in bench/configs/, a template there (.in, filled per run), or a
# generator's output (`gen` is a function ctx -> {name: text}). `load` is the request:
# paths, headers, body file. `base` names the run whose req/s and CPU per request this one's
# ratio "vs own" is taken against (None: it is a baseline itself). Runs a system cannot
# express are Skips, with the reason the report prints.

Run = namedtuple("Run", "suite case system variant kind port config gen scheme paths headers "
                        "body ready_path concurrency cpus threads base label expect")
Skip = namedtuple("Skip", "suite case system variant reason")


def run(suite, case, system, port, config=None, gen=None, kind=None, variant="", scheme="http",
        paths=("/",), headers=(), body=None, ready_path=None, concurrency=100, cpus=SUT_CPU,
        threads=1, base=None, label=None, expect=None):
    """`expect="json"`: the answer must be the backend's JSON body, byte for byte (checked
    once before the load)."""
    if expect is None and suite != "membrane":
        expect = "json"
    return Run(suite, case, system, variant, kind or system, port, config, gen, scheme,
               tuple(paths), tuple(headers), body, ready_path, concurrency, cpus, threads,
               base, label, expect)


def lua_body(name):
    """The request body a wrk script in bench/configs/ sends (its `wrk.body = '...'`)."""
    with open(os.path.join(CONFIGS, name)) as f:
        m = re.search(r"^wrk\.body = '(.*)'\s*$", f.read(), re.M)
    if not m:
        raise SystemExit("bench: no wrk.body in configs/%s" % name)
    return m.group(1)


# Bodies of the POST scenarios: (content type, extra headers, where the body comes from).
BODIES = {
    "mangos": ("application/json", (), ("lua", "post-mangos.lua")),
    "person-json": ("application/json", (), ("lua", "rest2soap.lua")),
    "person-soap": ("text/xml; charset=utf-8",
                    ('SOAPAction: "https://turnpike.example/person/createPerson"',),
                    ("lua", "soap-request.lua")),
    "order-json": ("application/json", (), ("file", "order-request.json")),
    "order-soap": ("text/xml; charset=utf-8",
                   ('SOAPAction: "https://turnpike.example/orders/submitOrder"',),
                   ("file", "order-request.xml")),
}

# Membrane's scenarios: (case, title, published ratio of Membrane to its own proxying).
MEMBRANE_CASES = [
    ("short", "1. Short-circuit (`return 200`, empty body), 350 in flight", None),
    ("proxy", "2. Reverse proxy to the backend (1 KB JSON)", None),
    ("auth", "3. Basic authentication + rate limiter, vs each system's own proxying", 0.987),
    ("tls", "4. TLS on both hops + basic authentication + rate limiter, vs each system's own "
            "plain proxying", None),
    ("openapi", "5. OpenAPI request validation (Fruitshop, `POST /shop/v2/products`), vs plain "
                "proxying of the same POST", 0.77),
    ("jsonprot", "5+. jsonProtection on the same POST (not one of Membrane's seven)", None),
    ("rest2soap", "6. REST to SOAP (`wsdl2openapi`, person-service.wsdl), vs plain proxying of "
                  "the same SOAP call", 0.55),
    ("soapvalidate", "7. SOAP validation of request and response (person-service.wsdl), vs "
                     "plain proxying", 0.45),
    ("rest2soap-orders", "6b. REST to SOAP on order-service.wsdl (imported XSD, nested and "
                         "repeated elements), vs plain proxying of the same SOAP call", 0.55),
    ("soapvalidate-orders", "7b. SOAP validation on order-service.wsdl, vs plain proxying", 0.45),
]
# The port of the `prometheus` API in the SOAP policy configs (fast-path misses are read there).
METRICS_PORT = 2090

# Targets of the SOAP scenarios, from the project's own goals.
TARGETS = {"rest2soap": 0.65, "rest2soap-orders": 0.65, "soapvalidate": 0.60,
           "soapvalidate-orders": 0.60}

NO_POLICY = {
    "nginx": "nginx has no %s",
    "haproxy": "HAProxy has no %s",
    "caddy": "Caddy has no %s",
    "pingap": "Pingap has no %s",
}


def membrane_plan():
    runs, skips = [], []
    M = "membrane"
    # 1. short-circuit
    runs += [
        run(M, "short", "turnpike", 2000, "turnpike-return.yaml", concurrency=350,
            label="turnpike, return"),
        run(M, "short", "nginx", 2020, "nginx-return.conf", concurrency=350, label="nginx, return 200"),
        run(M, "short", "haproxy", 2063, "haproxy-return.cfg", concurrency=350,
            label="HAProxy, http-request return"),
        run(M, "short", "caddy", 2067, "caddy-return.Caddyfile", concurrency=350,
            label="Caddy, respond"),
        run(M, "short", "pingap", 2069, "pingap-return.toml.in", concurrency=350,
            label="Pingap, mock plugin"),
    ]
    # 2. proxy: every system's own baseline for 1, 3 and 4
    runs += [
        run(M, "proxy", "turnpike", 2001, "turnpike-proxy.yaml", expect="json"),
        run(M, "proxy", "nginx", 2021, "nginx-proxy.conf", expect="json"),
        run(M, "proxy", "haproxy", 2031, "haproxy-proxy.cfg", expect="json"),
        run(M, "proxy", "caddy", 2068, "caddy-proxy.Caddyfile", expect="json"),
        run(M, "proxy", "pingap", 2070, "pingap-proxy.toml.in", expect="json"),
    ]
    # 3. basic auth + rate limiter
    runs += [
        run(M, "auth", "turnpike", 2041, gen=lambda ctx: {
            "turnpike.yaml": gen_policy_configs.scenario3(2041)}, headers=[BASIC],
            base="proxy", label="turnpike, basicAuthentication + rateLimiter", expect="json"),
        run(M, "auth", "nginx", 2062, "nginx-auth.conf", headers=[BASIC], base="proxy",
            label="nginx, auth_basic + limit_req", expect="json"),
        run(M, "auth", "haproxy", 2064, "haproxy-auth.cfg", headers=[BASIC], base="proxy",
            label="HAProxy, userlist + stick table", expect="json"),
        run(M, "auth", "pingap", 2071, "pingap-auth.toml.in", headers=[BASIC], base="proxy",
            label="Pingap, basic_auth + limit", expect="json"),
    ]
    skips.append(Skip(M, "auth", "caddy", "", "Caddy has no rate limiter in its standard build "
                      "(only the third-party caddy-ratelimit module)"))
    # 4. TLS both hops + auth + rate limiter
    runs += [
        run(M, "tls", "turnpike", 2004, "turnpike-s4.yaml.in", scheme="https", headers=[BASIC],
            base="proxy", label="turnpike, TLS both hops + basicAuthentication + rateLimiter",
            expect="json"),
        run(M, "tls", "nginx", 2065, "nginx-tls-auth.conf.in", scheme="https", headers=[BASIC],
            base="proxy", label="nginx, TLS both hops + auth_basic + limit_req", expect="json"),
        run(M, "tls", "haproxy", 2066, "haproxy-tls-auth.cfg.in", scheme="https",
            headers=[BASIC], base="proxy", label="HAProxy, TLS both hops + userlist + stick table",
            expect="json"),
    ]
    skips += [Skip(M, "tls", "caddy", "", "Caddy has no rate limiter in its standard build"),
              Skip(M, "tls", "pingap", "", "not set up: the suite runs Pingap for proxying, "
                   "short-circuit, key auth and limits only")]
    # 5. OpenAPI validation and JSON protection, against plain proxying of the same POST
    runs += [
        run(M, "openapi", "turnpike", 2001, "turnpike-proxy.yaml", variant="plain",
            paths=["/shop/v2/products"], body="mangos", label="turnpike, plain proxy"),
        run(M, "openapi", "turnpike", 2006, "turnpike-openapi.yaml", variant="policy",
            paths=["/shop/v2/products"], body="mangos", base="openapi/plain",
            label="turnpike, validateRequests"),
        run(M, "jsonprot", "turnpike", 2007, "turnpike-jsonprotection.yaml", variant="policy",
            paths=["/shop/v2/products"], body="mangos", base="openapi/plain",
            label="turnpike, jsonProtection"),
    ]
    # 6 and 7 (and 6b, 7b) against plain proxying of the same SOAP call
    runs += [
        run(M, "rest2soap", "turnpike", 2005, "turnpike-soap-plain.yaml", variant="plain",
            paths=["/person-service"], body="person-soap", label="turnpike, plain proxy (SOAP)"),
        run(M, "rest2soap", "turnpike", 2003, "turnpike-rest2soap.yaml", variant="policy",
            paths=["/create-person"], body="person-json", ready_path="/api-docs",
            base="rest2soap/plain", label="turnpike, wsdl2openapi"),
        run(M, "soapvalidate", "turnpike", 2004, "turnpike-soap-validate.yaml", variant="policy",
            paths=["/person-service"], body="person-soap", ready_path="/person-service?wsdl",
            base="rest2soap/plain", label="turnpike, soapProxy + xmlProtection + validator"),
        run(M, "rest2soap-orders", "turnpike", 2005, "turnpike-soap-plain.yaml", variant="plain",
            paths=["/order-service"], body="order-soap", label="turnpike, plain proxy (SOAP)"),
        run(M, "rest2soap-orders", "turnpike", 2060, "turnpike-rest2soap-orders.yaml",
            variant="policy", paths=["/submit-order"], body="order-json", ready_path="/api-docs",
            base="rest2soap-orders/plain", label="turnpike, wsdl2openapi"),
        run(M, "soapvalidate-orders", "turnpike", 2061, "turnpike-soap-validate-orders.yaml",
            variant="policy", paths=["/order-service"], body="order-soap",
            ready_path="/order-service?wsdl", base="rest2soap-orders/plain",
            label="turnpike, soapProxy + xmlProtection + validator"),
    ]
    for case, what in (("openapi", "OpenAPI validation"), ("jsonprot", "JSON protection policy"),
                       ("rest2soap", "REST to SOAP conversion"),
                       ("soapvalidate", "WSDL/XML Schema validation"),
                       ("rest2soap-orders", "REST to SOAP conversion"),
                       ("soapvalidate-orders", "WSDL/XML Schema validation")):
        for s in ("nginx", "haproxy", "caddy", "pingap"):
            skips.append(Skip(M, case, s, "", NO_POLICY[s] % what))
    return runs, skips


APISIX_PLUGINS = ["none", "key", "limit", "both"]
PLUGIN_LABELS = {"none": "no plugin", "key": "key-auth", "limit": "limit-count",
                 "both": "key-auth + limit-count"}


def apisix_plan(systems, ctx):
    runs, skips = [], []
    for backend in ("mock", "real"):
        for routes in (1, 100):
            for plugins in APISIX_PLUGINS:
                variant = "%s-%d-%s" % (backend, routes, plugins)
                for s in systems:
                    try:
                        sc.apisix(s, routes, plugins, backend, ctx)
                    except sc.NotExpressible as e:
                        skips.append(Skip("apisix", variant, s, variant, str(e)))
                        continue
                    headers = [API_KEY] if plugins in ("key", "both") else []
                    runs.append(run(
                        "apisix", variant, s, sc.APISIX_PORT, variant=variant,
                        gen=(lambda c, s=s, r=routes, p=plugins, b=backend: sc.apisix(s, r, p, b, c)),
                        paths=[sc.route_of(routes - 1)], headers=headers,
                        concurrency=APISIX_CONNECTIONS,
                        base=None if plugins == "none" else "%s-%d-none" % (backend, routes)))
    return runs, skips


def wso2_plan(systems):
    runs = []
    for threads in range(1, (os.cpu_count() or 2) + 1):
        for s in systems:
            runs.append(run(
                "wso2", "threads-%d" % threads, s, sc.WSO2_PORT, variant=str(threads),
                gen=(lambda c, s=s, t=threads: sc.wso2(s, t, c)),
                paths=["%sitem" % sc.wso2_route(i) for i in range(sc.WSO2_ROUTES)],
                concurrency=WSO2_CONNECTIONS, threads=threads,
                cpus=SUT_CPU if threads == 1 else "0-%d" % (threads - 1),
                base=None if threads == 1 else "threads-1"))
    return runs, []


def smoke_plan(ctx):
    """One short case per suite, turnpike and nginx only: for CI."""
    m, _ = membrane_plan()
    a, _ = apisix_plan(["turnpike", "nginx"], ctx)
    w, _ = wso2_plan(["turnpike", "nginx"])
    runs = [r for r in m if r.case == "proxy" and r.system in ("turnpike", "nginx")]
    runs += [r for r in a if r.variant == "mock-1-key"]
    runs += [r for r in w if r.variant == "1"]
    return runs, []


# ----------------------------------------------------------------- running


class Bench:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.procs = {}          # pid -> Popen of every server started and not yet stopped
        self.clk_tck = os.sysconf("SC_CLK_TCK")
        self.body_json = sc.backend_body()
        self.pki = None
        self.bodies = {}

    # -- processes

    def start(self, argv, logf, env=None, cpus=SUT_CPU):
        full = ["taskset", "-c", cpus] + argv
        with open(logf, "w") as out:
            p = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                 env=dict(os.environ, **(env or {})), start_new_session=True)
        self.procs[p.pid] = p
        return p

    def stop(self, p, timeout=40):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                log("pid %d still running %d s after SIGTERM: SIGKILL to its group" % (p.pid, timeout))
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()
        # nginx and HAProxy leave no workers behind their master; anything left in the group
        # (the server's own children) goes too.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        self.procs.pop(p.pid, None)
        return p.returncode

    def stop_all(self):
        for p in list(self.procs.values()):
            self.stop(p, timeout=5)

    # -- HTTP checks (standard library, certificates not verified)

    def request(self, scheme, port, path, method="GET", headers=(), body=None, timeout=2):
        if scheme == "https":
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=ctx)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            hdrs = dict(h.split(": ", 1) for h in headers)
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def wait_ready(self, proc, scheme, port, path, headers, logf, timeout=None):
        deadline = time.monotonic() + (timeout or float(os.environ.get("BENCH_READY_TIMEOUT", 15)))
        last = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError("exited during startup (status %s): %s"
                                   % (proc.returncode, tail(logf)))
            try:
                status, _ = self.request(scheme, port, path, headers=headers, timeout=1)
                if status == 200:
                    return
                last = status
            except (OSError, http.client.HTTPException) as e:
                last = e
            time.sleep(0.1)
        raise RuntimeError("no 200 from %s://127.0.0.1:%d%s within the timeout (last: %s): %s"
                           % (scheme, port, path, last, tail(logf)))

    # -- configs

    def make_pki(self):
        if self.pki is None:
            self.pki = os.path.join(self.tmp, "pki")
            subprocess.run(["bash", "-c", '. "$1"; bench_make_pki "$2"', "_", COMMON_SH, self.pki],
                           check=True)
            with open(os.path.join(self.pki, "server-combined.pem"), "w") as out:
                for n in ("server.pem", "server.key"):
                    with open(os.path.join(self.pki, n)) as f:
                        out.write(f.read())
        return self.pki

    def body_file(self, name):
        if name not in self.bodies:
            ctype, extra, (how, src) = BODIES[name]
            if how == "lua":
                text = lua_body(src)
                path = os.path.join(self.tmp, "body-%s" % name)
                with open(path, "w") as f:
                    f.write(text)
            else:
                path = os.path.join(CONFIGS, src)
            self.bodies[name] = path
        return self.bodies[name]

    def config_files(self, r, rundir):
        """The config the system starts with, and the configs to list in the report."""
        ctx = sc.Ctx(rundir, self.body_json)
        if r.gen is not None:
            files = r.gen(ctx)
            for name, text in files.items():
                with open(os.path.join(rundir, name), "w") as f:
                    f.write(text)
            return os.path.join(rundir, next(iter(files))), sorted(files)
        src = os.path.join(CONFIGS, r.config)
        if not r.config.endswith(".in"):
            return src, ["bench/configs/" + r.config]
        with open(src) as f:
            text = f.read()
        values = {"tmp": rundir, "configs": CONFIGS, "body": self.body_json}
        if "@PKI@" in text:
            values["pki"] = self.make_pki()
        out = os.path.join(rundir, r.config[:-3])
        with open(out, "w") as f:
            f.write(sc.fill(text, **values))
        return out, ["bench/configs/" + r.config]

    def command(self, r, cfg, rundir):
        if r.kind == "turnpike":
            return [self.args.turnpike, "run", "-c", cfg], {}
        if r.kind == "nginx":
            return ["nginx", "-p", rundir + "/", "-c", cfg, "-e", rundir + "/error.log"], {}
        if r.kind == "haproxy":
            return ["haproxy", "-db", "-f", cfg], {}
        if r.kind == "caddy":
            env = {"GOMAXPROCS": str(r.threads), "HOME": rundir, "XDG_DATA_HOME": rundir,
                   "XDG_CONFIG_HOME": rundir}
            return [self.args.caddy, "run", "--adapter", "caddyfile", "--config", cfg], env
        if r.kind == "pingap":
            return [self.args.pingap, "-c", cfg], {"RUST_LOG": "warn"}
        raise ValueError(r.kind)

    # -- one run

    def h2load_args(self, r, log_file):
        argv = ["h2load", "--h1", "-t1", "-c%d" % r.concurrency]
        for h in r.headers:
            argv += ["-H", h]
        if r.body:
            ctype, extra, _ = BODIES[r.body]
            argv += ["-d", self.body_file(r.body), "-H", "Content-Type: " + ctype]
            for h in extra:
                argv += ["-H", h]
        if log_file:
            argv += ["--log-file", log_file]
        return argv

    def urls(self, r):
        return ["%s://127.0.0.1:%d%s" % (r.scheme, r.port, p) for p in r.paths]

    def execute(self, r, rnd, prof):
        rundir = os.path.join(self.tmp, "r%d-%s-%s-%s" % (rnd, r.suite, r.case, r.system))
        os.makedirs(rundir, exist_ok=True)
        os.chmod(rundir, 0o755)
        rec = {"suite": r.suite, "case": r.case, "system": r.system, "variant": r.variant,
               "round": rnd, "label": r.label, "base": r.base, "concurrency": r.concurrency,
               "threads": r.threads, "cpus": r.cpus, "url": self.urls(r)[0],
               "paths": len(r.paths)}
        cfg, listed = self.config_files(r, rundir)
        rec["configs"] = listed
        argv, env = self.command(r, cfg, rundir)
        busy = ports_busy([r.port])
        if busy:
            raise RuntimeError("port %s is taken" % busy)
        logf = os.path.join(rundir, "server.log")
        proc = self.start(argv, logf, env, r.cpus)
        try:
            self.wait_ready(proc, r.scheme, r.port, r.ready_path or r.paths[0],
                            [h for h in r.headers], logf)
            # The measured request itself must succeed before it is measured.
            method, body, hdrs = "GET", None, list(r.headers)
            if r.body:
                ctype, extra, _ = BODIES[r.body]
                method = "POST"
                with open(self.body_file(r.body), "rb") as f:
                    body = f.read()
                hdrs += ["Content-Type: " + ctype] + list(extra)
            for p in r.paths:
                status, answer = self.request(r.scheme, r.port, p, method, hdrs, body)
                if status != 200:
                    raise RuntimeError("%s %s answered %d: %s" % (
                        method, p, status, answer[:300].decode("utf-8", "replace")))
                if r.expect == "json" and answer != self.body_json.encode():
                    raise RuntimeError("%s %s answered 200 but not with the backend's JSON body: %s"
                                       % (method, p, answer[:200].decode("utf-8", "replace")))
            a0 = backend_accepts()
            misses0 = self.fast_path_misses(r)
            if r.suite == "membrane":
                self.load_fixed(r, prof, rundir, proc, rec)
            else:
                self.load_timed(r, prof, rundir, proc, rec)
            a1 = backend_accepts()
            misses1 = self.fast_path_misses(r)
            if misses0 is not None and misses1 is not None:
                rec["fast_path_misses"] = {k: v - misses0.get(k, 0) for k, v in misses1.items()
                                           if v - misses0.get(k, 0) > 0}
            if a0 is not None and a1 is not None:
                rec["upstream_conns"] = max(0, a1 - a0 - 1)
            if proc.poll() is not None:
                raise RuntimeError("exited during the load (status %s): %s"
                                   % (proc.returncode, tail(logf)))
        finally:
            rc = self.stop(proc)
            if r.kind == "turnpike" and rc not in (0, None):
                log("turnpike exited with status %s after SIGTERM (expected 0)" % rc)
        return rec

    def fast_path_misses(self, r):
        """The SOAP fast paths' misses per reason so far, from the `prometheus` API the SOAP
        configs serve on METRICS_PORT; None for other runs."""
        if r.kind != "turnpike" or r.case not in TARGETS or r.variant != "policy":
            return None
        status, text = self.request("http", METRICS_PORT, "/metrics")
        if status != 200:
            raise RuntimeError("the SOAP config's /metrics answered %d" % status)
        return parse_fast_path_misses(text.decode("utf-8", "replace"))

    def h2load(self, argv, out_file):
        with open(out_file, "w") as out:
            p = subprocess.run(["taskset", "-c", LOAD_CPU] + argv, stdout=out,
                               stderr=subprocess.STDOUT)
        with open(out_file) as f:
            text = f.read()
        if p.returncode != 0:
            raise RuntimeError("h2load failed (status %d): %s" % (p.returncode, text[-800:]))
        return text

    def load_fixed(self, r, prof, rundir, proc, rec):
        """Membrane's method: warm up with `warmup` requests (not counted), then measure
        `requests` requests at the same concurrency; CPU over the measured run."""
        n, w = prof["requests"], prof["warmup"]
        base = self.h2load_args(r, None)
        self.h2load(base + ["-n%d" % max(w, r.concurrency)] + self.urls(r),
                    os.path.join(rundir, "warmup.txt"))
        log_file = os.path.join(rundir, "h2load.log")
        before = benchlib.proctree(proc.pid)
        text = self.h2load(self.h2load_args(r, log_file) + ["-n%d" % n] + self.urls(r),
                           os.path.join(rundir, "h2load.txt"))
        after = benchlib.proctree(proc.pid)
        self.combine(rec, text, log_file, before, after, None)

    def load_timed(self, r, prof, rundir, proc, rec):
        """APISIX's and WSO2's method: load for `duration` s after `warmup` s; CPU and
        requests in a window inside the measured part (its first and last 0.5 s left out)."""
        d, w = prof["duration"], prof["warmup"]
        log_file = os.path.join(rundir, "h2load.log")
        argv = self.h2load_args(r, log_file) + ["-D%d" % d, "--warm-up-time=%d" % w] + self.urls(r)
        out_file = os.path.join(rundir, "h2load.txt")
        started = time.time()
        with open(out_file, "w") as out:
            p = subprocess.Popen(["taskset", "-c", LOAD_CPU] + argv, stdout=out,
                                 stderr=subprocess.STDOUT)
        try:
            sleep_until(started + w + 0.5)
            before = benchlib.proctree(proc.pid, r.port)
            sleep_until(started + w + d - 0.5)
            after = benchlib.proctree(proc.pid, r.port)
        finally:
            p.wait()
        with open(out_file) as f:
            text = f.read()
        if p.returncode != 0:
            raise RuntimeError("h2load failed (status %d): %s" % (p.returncode, text[-800:]))
        self.combine(rec, text, log_file, before, after, int((started + w) * 1e6))

    def combine(self, rec, text, log_file, before, after, since_us):
        h = parse_h2load_summary(text)
        with open(log_file) as f:
            lat = benchlib.h2load_log_stats(f, since_us)
        m = benchlib.measure(before, after, h["done"], self.clk_tck)
        if not m["window"] and after.get("cpu_ns") and h["done"]:
            # The servers' threads live through the whole run, so their schedstat (ns) is
            # finer than the clock ticks benchlib uses for a whole run.
            m["cpu_s"] = (after["cpu_ns"] - before["cpu_ns"]) / 1e9
            m["cpu_us_per_req"] = m["cpu_s"] * 1e6 / h["done"]
            m["cpu_util_pct"] = 100.0 * m["cpu_s"] / m["window_s"] if m["window_s"] > 0 else None
        rec.update({k: m[k] for k in ("window", "window_s", "cpu_s", "cpu_us_per_req",
                                      "cpu_util_pct", "rss_mb", "sleeps_per_req", "procs")})
        rec["requests"] = h["done"]
        rec["rps"] = h["rps"]
        rec["window_requests"] = m["requests"]
        for k, v in lat.items():
            if k.startswith("p"):
                rec[k] = v
        # Errors: non-2xx answers and requests that failed, however h2load counted them.
        rec["errors"] = max(lat["errors"], h["non2xx"], h["failed"]) + h["errored"] + h["timeout"]
        rec["error_rate"] = rec["errors"] / float(max(1, h["done"] + h["errored"] + h["timeout"]))
        log("  -> %.0f req/s, CPU %s µs/req (%s%%), p50 %s ms, p99 %s ms, RSS %.1f MB, errors %d"
            % (rec["rps"], fmt(rec["cpu_us_per_req"], ".1f"), fmt(rec["cpu_util_pct"], ".0f"),
               fmt(rec.get("p50_ms"), ".3f"), fmt(rec.get("p99_ms"), ".3f"), rec["rss_mb"],
               rec["errors"]))


def parse_fast_path_misses(text):
    """`turnpike_soap_fast_path_misses_total{reason="…"} N` lines → {reason: N}."""
    out = {}
    for m in re.finditer(r'^turnpike_soap_fast_path_misses_total\{reason="([a-z-]+)"\} (\d+)',
                         text, re.M):
        out[m.group(1)] = int(m.group(2))
    return out


def parse_h2load_summary(text):
    """req/s and request counts from h2load's summary (HTTP/1.1 or HTTP/2)."""
    out = {"rps": None, "done": None, "failed": 0, "errored": 0, "timeout": 0, "non2xx": 0}
    m = re.search(r"^finished in [\d.]+\w+, ([\d.]+) req/s", text, re.M)
    if m:
        out["rps"] = float(m.group(1))
    m = re.search(r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", text, re.M)
    if m:
        out["done"] = int(m.group(3))
        out["failed"], out["errored"], out["timeout"] = (int(m.group(i)) for i in (5, 6, 7))
    m = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text, re.M)
    if m:
        out["non2xx"] = sum(int(m.group(i)) for i in (2, 3, 4))
    if out["rps"] is None or out["done"] is None:
        raise RuntimeError("could not parse h2load's output: %s" % text[-500:])
    return out


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()[-n:]
        return "\n".join(lines) if lines else "(no output)"
    except OSError:
        return "(no log)"


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def sleep_until(t):
    d = t - time.time()
    if d > 0:
        time.sleep(d)


def ports_busy(ports):
    busy = []
    for port in ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            busy.append(port)
        finally:
            s.close()
    return busy


def backend_accepts():
    """New connections the backend accepted so far (its stub_status on 2011)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:2011/status", timeout=2) as f:
            return int(f.read().decode().splitlines()[2].split()[0])
    except (OSError, ValueError, IndexError):
        return None


def tool_version(argv, pattern):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, p.stdout + p.stderr)
    return m.group(1) if m else None


def find_binary(explicit, name, extra=()):
    if explicit:
        return explicit if os.path.isfile(explicit) and os.access(explicit, os.X_OK) else None
    found = shutil.which(name)
    if found:
        return found
    for path in extra:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def machine_info(args):
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
            cpu = m.group(1) if m else ""
    except OSError:
        pass
    rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "no commit"
    if subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                      capture_output=True, text=True).stdout.strip():
        rev += ", dirty tree"
    versions = {
        "turnpike": "`%s` (repo HEAD %s)" % (args.turnpike, rev) if args.turnpike else None,
        "nginx": tool_version(["nginx", "-v"], r"nginx/(\S+)"),
        "haproxy": tool_version(["haproxy", "-v"], r"HAProxy version (\S+)"),
        "caddy": tool_version([args.caddy, "version"], r"v?(\d+\.\d+\.\d+)") if args.caddy else None,
        "pingap": (tool_version([args.pingap, "--version"], r"(\d+\.\d+\.\d+)") or "unknown version")
        if args.pingap else None,
        "h2load": tool_version(["h2load", "--version"], r"nghttp2/(\S+)"),
    }
    return {"cpus": os.cpu_count(), "cpu": cpu or "unknown CPU", "kernel": os.uname().release,
            "commit": rev, "versions": versions}


# --------------------------------------------------------------------- main


def plan_for(suite, systems, ctx):
    if suite == "membrane":
        runs, skips = membrane_plan()
    elif suite == "apisix":
        runs, skips = apisix_plan(SYSTEMS, ctx)
    elif suite == "wso2":
        runs, skips = wso2_plan(SYSTEMS)
    else:
        runs, skips = smoke_plan(ctx)
    return runs, skips


def cmd_run(args):
    suites = SUITES if args.suite == "all" else [args.suite]
    mode = "smoke" if args.suite == "smoke" else ("quick" if args.quick else "full")
    args.turnpike = os.path.abspath(args.turnpike) if args.turnpike else None
    if not args.turnpike or not os.access(args.turnpike, os.X_OK):
        die("no turnpike binary at %s; build one (cargo build --release) or pass --turnpike PATH"
            % args.turnpike)
    args.caddy = find_binary(args.caddy, "caddy")
    args.pingap = find_binary(args.pingap, "pingap",
                              [os.path.expanduser("~/.cargo/bin/pingap")])
    missing = [t for t in ("h2load", "nginx", "taskset", "ss", "bash", "openssl")
               if not shutil.which(t)]
    if missing:
        die("missing tools: %s (bench/install-deps.sh installs them)" % ", ".join(missing))
    if (os.cpu_count() or 1) < 2:
        die("needs at least 2 CPUs (the system under test on CPU 1, the load on CPU 0)")
    want = SYSTEMS if not args.systems else args.systems.split(",")
    for s in want:
        if s not in SYSTEMS:
            die("--systems: unknown system %r (known: %s)" % (s, ",".join(SYSTEMS)))
    absent = {}
    if not shutil.which("haproxy"):
        absent["haproxy"] = "not installed (bench/install-deps.sh)"
    if not args.caddy:
        absent["caddy"] = "not installed (bench/install-deps.sh; Debian package caddy)"
    if not args.pingap:
        absent["pingap"] = "not installed (bench/install-deps.sh --with-pingap)"
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(65536, hard), hard))
    except (ValueError, OSError):
        pass

    tmp = tempfile.mkdtemp(prefix="turnpike-suite.")
    os.chmod(tmp, 0o755)   # nginx workers may run as an unprivileged user
    bench = Bench(args, tmp)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = args.out or os.path.join(HERE, "results", "%s-%s" % (stamp, args.suite))
    os.makedirs(out_dir, exist_ok=True)
    info = machine_info(args)
    failed = []

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)
    t0 = time.time()
    runs_path = os.path.join(out_dir, "runs.jsonl")
    meta = {"suites": suites if mode != "smoke" else ["smoke"], "mode": mode,
            "profiles": {s: PROFILES[mode][s] for s in SUITES}, "machine": info,
            "command": os.environ.get("BENCH_COMMAND") or "bench/suite.py " + " ".join(sys.argv[1:]),
            "absent": absent, "skips": [], "failures": [], "configs": {}}
    try:
        log("backend: nginx on 127.0.0.1:2010 (CPU %s)" % LOAD_CPU)
        if ports_busy([2010, 2011, 2012]):
            die("ports 2010-2012 are taken (another benchmark running?); the suite needs 2000-2099")
        bdir = os.path.join(tmp, "backend")
        os.makedirs(bdir)
        backend = bench.start(["nginx", "-p", bdir + "/", "-c", os.path.join(CONFIGS, "nginx-backend.conf"),
                               "-e", bdir + "/error.log"], os.path.join(bdir, "server.log"), cpus=LOAD_CPU)
        bench.wait_ready(backend, "http", 2010, "/", [], os.path.join(bdir, "server.log"))
        tls_backend = None
        with open(runs_path, "w") as runs_out:
            for suite in meta["suites"]:
                ctx = sc.Ctx(tmp, bench.body_json)
                runs, skips = plan_for(suite, want, ctx)
                if args.cases:
                    keep = args.cases.split(",")
                    runs = [r for r in runs if r.case in keep or r.variant in keep]
                    skips = [s for s in skips if s.case in keep or s.variant in keep]
                runs = [r for r in runs if r.system in want]
                for r in runs:
                    if r.system in absent:
                        skips.append(Skip(r.suite, r.case, r.system, r.variant, absent[r.system]))
                runs = [r for r in runs if r.system not in absent]
                meta["skips"] += [s._asdict() for s in skips if s.system in want]
                prof = dict(PROFILES[mode][suite if suite != "smoke" else "membrane"])
                if args.rounds:
                    prof["rounds"] = args.rounds
                if not runs:
                    log("%s: nothing to run" % suite)
                    continue
                if any(r.scheme == "https" for r in runs) and tls_backend is None:
                    pki = bench.make_pki()
                    tdir = os.path.join(tmp, "tls-backend")
                    os.makedirs(tdir)
                    with open(os.path.join(CONFIGS, "nginx-tls-backend.conf.in")) as f:
                        conf = sc.fill(f.read(), pki=pki, body=bench.body_json)
                    with open(os.path.join(tdir, "nginx.conf"), "w") as f:
                        f.write(conf)
                    tls_backend = bench.start(["nginx", "-p", tdir + "/", "-c", os.path.join(tdir, "nginx.conf"),
                                               "-e", tdir + "/error.log"], os.path.join(tdir, "server.log"),
                                              cpus=LOAD_CPU)
                    bench.wait_ready(tls_backend, "https", 2012, "/", [], os.path.join(tdir, "server.log"))
                rounds = prof["rounds"]
                log("%s (%s): %d runs x %d round%s" % (suite, mode, len(runs), rounds,
                                                      "" if rounds == 1 else "s"))
                for rnd in range(1, rounds + 1):
                    for r in runs:
                        p = PROFILES[mode][r.suite]
                        p = dict(p, rounds=rounds)
                        log("%s round %d/%d: %s / %s%s" % (r.suite, rnd, rounds, r.case, r.system,
                                                            " (%s)" % r.label if r.label else ""))
                        try:
                            rec = bench.execute(r, rnd, p)
                        except RuntimeError as e:
                            log("  FAILED: %s" % e)
                            failed.append("%s/%s/%s round %d: %s" % (r.suite, r.case, r.system, rnd, e))
                            meta["failures"].append({"suite": r.suite, "case": r.case,
                                                     "system": r.system, "round": rnd,
                                                     "error": str(e)[:600]})
                            continue
                        meta["configs"].setdefault(r.system, [])
                        for c in rec["configs"]:
                            if c not in meta["configs"][r.system] and c.startswith("bench/"):
                                meta["configs"][r.system].append(c)
                        if r.gen is not None:
                            keep_generated(tmp, out_dir, r, rec)
                        runs_out.write(json.dumps(rec, sort_keys=True) + "\n")
                        runs_out.flush()
    except KeyboardInterrupt:
        log("interrupted")
        bench.stop_all()
        return 130
    finally:
        bench.stop_all()
        meta["elapsed_s"] = time.time() - t0
        with open(os.path.join(out_dir, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
        if not args.keep_tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log("kept %s" % tmp)
    report = suite_report.write(out_dir)
    log("report: %s" % os.path.relpath(report, os.getcwd()))
    if mode == "smoke":
        with open(runs_path) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        bad = [r for r in recs if r["errors"] or not r["requests"]]
        if failed or bad or len(recs) == 0:
            for r in bad:
                log("smoke: %s/%s/%s: %d errors, %s requests" % (r["suite"], r["case"], r["system"],
                                                                 r["errors"], r["requests"]))
            die("smoke run failed (%d failed runs, %d with errors)" % (len(failed), len(bad)))
        log("smoke: %d runs, no errors" % len(recs))
    return 1 if failed else 0


def keep_generated(tmp, out_dir, r, rec):
    """Copies the generated config of a run into the results, once per case and system."""
    dest = os.path.join(out_dir, "configs", r.suite, "%s-%s" % (r.case, r.system))
    if os.path.isdir(dest):
        return
    os.makedirs(dest)
    src = os.path.join(tmp, "r%d-%s-%s-%s" % (rec["round"], r.suite, r.case, r.system))
    for name in rec["configs"]:
        if "/" not in name and os.path.isfile(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), dest)
    rec["configs"] = [os.path.relpath(os.path.join(dest, n), out_dir) for n in rec["configs"]
                      if "/" not in n]


def cmd_configs(args):
    """Writes every generated config (apisix and wso2 suites) under OUT."""
    body = sc.backend_body()
    n = 0
    for s in SYSTEMS:
        for backend in ("mock", "real"):
            for routes in (1, 100):
                for plugins in APISIX_PLUGINS:
                    d = os.path.join(args.out, "apisix", "%s-%d-%s" % (backend, routes, plugins), s)
                    try:
                        files = sc.apisix(s, routes, plugins, backend, sc.Ctx(d, body))
                    except sc.NotExpressible as e:
                        os.makedirs(d, exist_ok=True)
                        with open(os.path.join(d, "NOT-EXPRESSIBLE"), "w") as f:
                            f.write(str(e) + "\n")
                        continue
                    n += write_files(d, files)
        for threads in (1, 2):
            d = os.path.join(args.out, "wso2", "threads-%d" % threads, s)
            n += write_files(d, sc.wso2(s, threads, sc.Ctx(d, body)))
    print("%d files under %s" % (n, args.out))
    return 0


def write_files(d, files):
    os.makedirs(d, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    return len(files)


def cmd_report(args):
    print(suite_report.write(args.dir))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="bench/suite.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run", help="run suites")
    p.add_argument("--suite", required=True, choices=SUITES + ["all", "smoke"])
    p.add_argument("--quick", action="store_true",
                   help="a few seconds per case, one round (development; the report says so)")
    p.add_argument("--turnpike", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")), "release", "turnpike"))
    p.add_argument("--pingap", help="Pingap binary (default: pingap on PATH or ~/.cargo/bin)")
    p.add_argument("--caddy", help="Caddy binary (default: caddy on PATH)")
    p.add_argument("--systems", help="only these systems (comma-separated; default all)")
    p.add_argument("--cases", help="only these cases or variants (comma-separated), e.g. "
                   "proxy,auth or mock-1-key or threads-1")
    p.add_argument("--rounds", type=int, help="rounds (default: 5 membrane, 3 apisix and wso2; "
                   "1 with --quick)")
    p.add_argument("--out", help="folder of the report (default bench/results/<time>-<suite>)")
    p.add_argument("--keep-tmp", action="store_true", help="keep the run's temporary folder")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("configs", help="write the generated configs")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_configs)
    p = sub.add_parser("report", help="rebuild a results folder's report and charts")
    p.add_argument("dir")
    p.set_defaults(func=cmd_report)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
