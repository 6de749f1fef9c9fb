#!/usr/bin/env python3
"""What one feature costs over plain proxying, in one run: turnpike with each case's config and
with the plain proxy config, interleaved round by round, one worker on CPU 1, wrk and the nginx
backend (bench/configs/nginx-backend.conf) on CPU 0, and nginx proxying for reference.

Per case: median req/s and CPU µs per request (schedstat of every thread of the gateway and of
its child processes, such as Python executors) and the ratio to plain proxying.

Usage: bench/overhead.py --set NAME [--rounds N] [--duration S] [--turnpike PATH]
                         [--baseline PATH] [--out FILE]
With --baseline (the binary of the previous commit), every case also runs on it, interleaved
in each round, and is reported as "… (baseline)": an A/B of a change on the same machine.
Sets: proxy (plain proxying and a short-circuit `return`, for A/B runs), conditions (if/choose, per-operation flows, Python policies), telemetry (metrics,
tracing, the store of recent exchanges), ratelimit (local, Redis exact and local-sync),
upstreams (a pool of three nginx backends; then one node killed under load), compress (a
20 KB JSON body proxied plain and compressed with gzip 6, br 4 and zstd 3; nginx proxying it
plain and with `gzip_comp_level 6` for reference).
Needs nginx, wrk, taskset; redis-server for `ratelimit`; python3 for `conditions`.
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import benchlib

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
FRUITSHOP = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "openapi", "fruitshop-v2-2-0.oas.yml"))
SUT_CPU, LOAD_CPU = "1", "0"
PORT, BACKEND, NGINX_PORT, REDIS_PORT, COLLECTOR_PORT = 2001, 2010, 2021, 2079, 2090
# The backend of the `compress` set: a 20 KB JSON document (big_json()).
BIG_BACKEND = 2017

HEAD = "gateway: {{ threads: 1, accessLog: false{extra} }}\n---\n"
API = "api:\n  port: %d\n  ip: 127.0.0.1\n{body}  target: {{ host: 127.0.0.1, port: %d }}\n" % (PORT, BACKEND)

POLICIES_PY = '''
from turnpike_policy import Policy


class SetOne(Policy):
    def on_request(self, request):
        request.headers["x-py"] = "1"


class Nothing(Policy):
    def on_request(self, request):
        pass
'''


def api(body, gateway_extra=""):
    return HEAD.format(extra=gateway_extra) + API.format(body=body)


def cases(name, tmp):
    """(label, config text, path, headers) of each case of a set; the first is the reference."""
    plain = ("plain proxy", api(""), "/items/7", [])
    if name == "conditions":
        pol = os.path.join(tmp, "policies")
        os.makedirs(pol, exist_ok=True)
        with open(os.path.join(pol, "bench_policies.py"), "w") as f:
            f.write(POLICIES_PY)
        package = os.path.join(REPO, "python")
        wrapper = os.path.join(tmp, "python")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nPYTHONPATH=%s exec python3 \"$@\"\n" % package)
        os.chmod(wrapper, 0o755)
        py = ', python: { interpreter: "%s", path: [ "%s" ], workers: 1 }' % (wrapper, pol)
        set_header = "  flow: [ { setHeader: { name: X-Lane, value: fast } } ]\n"
        cond = ("  flow:\n    - if:\n        test: 'request.headers[\"x-tier\"] == \"gold\" && request.method != \"DELETE\"'\n"
                "        flow: [ { setHeader: { name: X-Lane, value: fast } } ]\n"
                "        else: [ { setHeader: { name: X-Lane, value: slow } } ]\n")
        spec = "  openapi: [ { location: %s } ]\n" % FRUITSHOP
        ops_api_flow = spec + "  flow: [ { setHeader: { name: X-Op, value: get } } ]\n"
        ops_own = spec + "  operations:\n    getProduct:\n      flow: [ { setHeader: { name: X-Op, value: get } } ]\n"
        cond_only = ("  flow:\n    - if:\n        test: 'request.headers[\"x-tier\"] == \"gold\" && request.method != \"DELETE\"'\n"
                     "        flow: [ { removeHeader: { name: X-Absent } } ]\n")
        gold = [("X-Tier", "gold")]
        return [
            plain,
            ("removeHeader (absent header)", api("  flow: [ { removeHeader: { name: X-Absent } } ]\n"), "/items/7", gold),
            ("if (2-clause CEL) + removeHeader", api(cond_only), "/items/7", gold),
            ("setHeader", api(set_header), "/items/7", gold),
            ("if (2-clause CEL) + setHeader", api(cond), "/items/7", gold),
            ("openapi, setHeader in the API's flow", api(ops_api_flow), "/shop/v2/products/7", []),
            ("openapi, setHeader in the operation's flow", api(ops_own), "/shop/v2/products/7", []),
            ("python: a no-op policy", api("  flow: [ { python: { module: bench_policies, class: Nothing } } ]\n", py), "/items/7", []),
            ("python: sets one header", api("  flow: [ { python: { module: bench_policies, class: SetOne } } ]\n", py), "/items/7", []),
        ]
    if name == "telemetry":
        def tel(body):
            return api("") + "---\ntelemetry:\n" + body
        off = "  metrics: { enabled: false }\n  exchangeStore: { size: 0 }\n"
        trace = "  tracing: { endpoint: http://127.0.0.1:%d, sampling: { ratio: %s } }\n"
        return [
            ("metrics and exchange store off", tel(off), "/items/7", []),
            ("metrics on (default)", tel("  exchangeStore: { size: 0 }\n"), "/items/7", []),
            ("exchange store on (default: 1000)", tel("  metrics: { enabled: false }\n"), "/items/7", []),
            ("both on (the defaults)", api(""), "/items/7", []),
            ("defaults + tracing 1% (collector down)", tel(trace % (COLLECTOR_PORT, "1%")), "/items/7", []),
            ("defaults + tracing 100% (collector down)", tel(trace % (COLLECTOR_PORT, "100%")), "/items/7", []),
        ]
    if name == "upstreams":
        nodes = "    nodes: [ { url: http://127.0.0.1:2010 }, { url: http://127.0.0.1:2013 }, { url: http://127.0.0.1:2014 } ]\n"
        pool = "api:\n  port: %d\n  ip: 127.0.0.1\n  target:\n%s" % (PORT, nodes)
        checks = ("    healthCheck: { active: { path: /, interval: 1s }, passive: { consecutiveFailures: 3, ejectFor: 10s } }\n"
                  "    retries: { attempts: 2, on: [connect-failure, reset, 502, 503] }\n")
        return [
            plain,
            ("pool of 3, roundRobin", HEAD.format(extra="") + pool, "/items/7", []),
            ("pool of 3, leastRequests", HEAD.format(extra="") + pool + "    loadBalancing: leastRequests\n", "/items/7", []),
            ("pool of 3, health checks + retries", HEAD.format(extra="") + pool + checks, "/items/7", []),
        ]
    if name == "proxy":
        ret = "  flow: [ { return: { status: 200, contentType: application/json, body: '{\"ok\":true}' } } ]\n"
        return [plain, ("return (short-circuit)", api(ret), "/items/7", [])]
    if name == "compress":
        big = "api:\n  port: %d\n  ip: 127.0.0.1\n{body}  target: {{ host: 127.0.0.1, port: %d }}\n" % (PORT, BIG_BACKEND)
        comp = "  flow: [ { compress: { encodings: [%s], minSize: 1KB } } ]\n"
        return [
            ("plain proxy, 20 KB JSON", HEAD.format(extra="") + big.format(body=""), "/big.json", []),
            ("compress gzip 6", HEAD.format(extra="") + big.format(body=comp % "gzip"), "/big.json", [("Accept-Encoding", "gzip")]),
            ("compress br 4", HEAD.format(extra="") + big.format(body=comp % "br"), "/big.json", [("Accept-Encoding", "br")]),
            ("compress zstd 3", HEAD.format(extra="") + big.format(body=comp % "zstd"), "/big.json", [("Accept-Encoding", "zstd")]),
        ]
    if name == "ratelimit":
        lim = "  flow: [ { rateLimiter: { requestLimit: 1000000000, requestLimitDuration: PT1M, key: ip%s } } ]\n"
        redis = ", store: { redis: { url: redis://127.0.0.1:%d/0, timeout: 50ms } }" % REDIS_PORT
        return [
            plain,
            ("rateLimiter, local", api(lim % ""), "/items/7", []),
            ("rateLimiter, Redis exact", api(lim % (redis + ", mode: exact")), "/items/7", []),
            ("rateLimiter, Redis local-sync 100ms", api(lim % (redis + ", mode: local-sync, syncInterval: 100ms")), "/items/7", []),
        ]
    sys.exit("unknown set %s" % name)


def tree_cpu_ns(pid):
    """CPU time of every live thread of `pid` and of its descendants."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            for tid in os.listdir("/proc/%d/task" % p):
                try:
                    with open("/proc/%d/task/%s/schedstat" % (p, tid)) as f:
                        total += int(f.read().split()[0])
                except (OSError, ValueError):
                    pass
            with open("/proc/%d/task/%d/children" % (p, p)) as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return total


def wait_200(url, headers, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            req = urllib.request.Request(url, headers=dict(headers))
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    sys.exit("%s did not answer 200" % url)


def wrk(url, headers, seconds):
    """wrk's figures (benchlib.parse_wrk) for a run against `url`."""
    cmd = ["taskset", "-c", LOAD_CPU, "wrk", "-t1", "-c50", "-d%ds" % seconds, "--latency"]
    for k, v in headers:
        cmd += ["-H", "%s: %s" % (k, v)]
    cmd.append(url)
    return benchlib.parse_wrk(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def run_case(cmd, url, headers, seconds, env=None):
    proc = subprocess.Popen(["taskset", "-c", SUT_CPU] + cmd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    try:
        wait_200(url, headers)
        wrk(url, headers, 1)
        time.sleep(0.2)
        before = tree_cpu_ns(proc.pid)
        w = wrk(url, headers, seconds)
        cpu = tree_cpu_ns(proc.pid) - before
        return {"rps": w["rps"], "cpu_us": cpu / 1000 / max(w["requests"], 1),
                "errors": w["non2xx"] + w["sock_errors"]}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def failover(cmd, url, victim, seconds, what):
    """wrk against a pool (`cmd` serves it at `url`) while one node (`victim`) is killed."""
    proc = subprocess.Popen(["taskset", "-c", SUT_CPU] + cmd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_200(url, [])
        def crash():
            # The node's master and workers at once, as a crashed host.
            subprocess.run(["pkill", "-KILL", "-P", str(victim.pid)], check=False)
            victim.kill()
        timer = threading.Timer(seconds / 3, crash)
        timer.start()
        w = wrk(url, [], seconds)
        timer.join()
        return ("A node killed a third into a %d s wrk run against %s: "
                "%d requests, %d non-2xx, %d socket errors." % (seconds, what, w["requests"], w["non2xx"], w["sock_errors"]))
    finally:
        proc.terminate()
        proc.wait(10)


def start_backend(tmp, port, status):
    """A copy of the nginx backend on `port` (its stub_status on `status`)."""
    d = os.path.join(tmp, "backend%d" % port)
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    with open(os.path.join(BENCH, "configs", "nginx-backend.conf")) as src, open(conf, "w") as dst:
        dst.write(src.read().replace("127.0.0.1:2010", "127.0.0.1:%d" % port)
                  .replace("127.0.0.1:2011", "127.0.0.1:%d" % status))
    p = subprocess.Popen(["taskset", "-c", LOAD_CPU, "nginx", "-p", d + "/", "-c", conf, "-e", os.path.join(d, "error.log")])
    wait_200("http://127.0.0.1:%d/" % port, [])
    return p


def big_json():
    """A 20 KB JSON document like an API's listing (ids, names, prices, tags)."""
    items = []
    i = 0
    while len(",".join(items)) < 20000:
        items.append('{"id":%d,"sku":"TP-%04d","name":"Widget %d","price":%d.99,"stock":%d,"tags":["bench","turnpike"]}'
                     % (i, i, i, 10 + i % 50, 100 + 7 * i))
        i += 1
    return '{"count":%d,"items":[%s]}' % (len(items), ",".join(items))


def start_big_backend(tmp):
    """nginx serving big_json() at /big.json on BIG_BACKEND."""
    d = os.path.join(tmp, "big")
    os.makedirs(os.path.join(d, "www"), exist_ok=True)
    # nginx's workers (user nobody) read the document: the folders must let them through.
    for p in (tmp, d, os.path.join(d, "www")):
        os.chmod(p, 0o755)
    with open(os.path.join(d, "www", "big.json"), "w") as f:
        f.write(big_json())
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write("""daemon off;
master_process on;
worker_processes 1;
pid nginx.pid;
error_log error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path client_body;
    proxy_temp_path proxy;
    fastcgi_temp_path fastcgi;
    uwsgi_temp_path uwsgi;
    scgi_temp_path scgi;
    types { application/json json; }
    server { listen 127.0.0.1:%d; root %s; etag off; }
}
""" % (BIG_BACKEND, os.path.join(d, "www")))
    p = subprocess.Popen(["taskset", "-c", LOAD_CPU, "nginx", "-p", d + "/", "-c", conf, "-e", os.path.join(d, "error.log")])
    wait_200("http://127.0.0.1:%d/big.json" % BIG_BACKEND, [])
    return p


def nginx_big_conf(tmp, gzip):
    """nginx-proxy.conf in front of the big backend, with `gzip` at level 6 or without."""
    d = os.path.join(tmp, "nginx-big-%s" % ("gzip" if gzip else "plain"))
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    with open(os.path.join(BENCH, "configs", "nginx-proxy.conf")) as src, open(conf, "w") as dst:
        text = src.read().replace("server 127.0.0.1:2010;", "server 127.0.0.1:%d;" % BIG_BACKEND)
        if gzip:
            text = text.replace("    access_log off;", "    access_log off;\n    gzip on;\n    gzip_comp_level 6;\n"
                                "    gzip_types application/json;\n    gzip_min_length 1024;\n    gzip_proxied any;\n    gzip_vary on;")
        dst.write(text)
    return ["nginx", "-p", d + "/", "-c", conf, "-e", os.path.join(d, "error.log")]


def nginx_pool_conf(tmp):
    """nginx-proxy.conf with an upstream block of the three backends (nginx's defaults:
    round robin, `proxy_next_upstream error timeout`)."""
    d = os.path.join(tmp, "nginx-pool")
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    with open(os.path.join(BENCH, "configs", "nginx-proxy.conf")) as src, open(conf, "w") as dst:
        dst.write(src.read().replace("server 127.0.0.1:2010;",
                                     "server 127.0.0.1:2010;\n        server 127.0.0.1:2013;\n        server 127.0.0.1:2014;"))
    return ["nginx", "-p", d + "/", "-c", conf, "-e", os.path.join(d, "error.log")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", required=True, choices=["proxy", "conditions", "telemetry", "ratelimit", "upstreams", "compress"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--turnpike", default=os.path.join(REPO, "target", "release", "turnpike"))
    ap.add_argument("--baseline", help="another turnpike binary to run every case on, interleaved")
    ap.add_argument("--set-only", action="store_true", help="skip the nginx reference runs")
    ap.add_argument("--out")
    args = ap.parse_args()
    for tool in ["nginx", "wrk", "taskset"]:
        if not shutil.which(tool):
            sys.exit("missing %s (bench/install-deps.sh)" % tool)
    tmp = tempfile.mkdtemp(prefix="turnpike-overhead.")
    procs = []
    try:
        os.makedirs(os.path.join(tmp, "backend"))
        procs.append(subprocess.Popen(["taskset", "-c", LOAD_CPU, "nginx", "-p", os.path.join(tmp, "backend") + "/",
                                       "-c", os.path.join(BENCH, "configs", "nginx-backend.conf"),
                                       "-e", os.path.join(tmp, "backend", "error.log")]))
        wait_200("http://127.0.0.1:%d/" % BACKEND, [])
        backends = {}
        if args.set == "upstreams":
            # Two more copies of the backend (their stub_status moved off 2011).
            for port, status in ((2013, 2015), (2014, 2016)):
                backends[port] = start_backend(tmp, port, status)
                procs.append(backends[port])
        if args.set == "compress":
            procs.append(start_big_backend(tmp))
        if args.set == "ratelimit":
            procs.append(subprocess.Popen(["taskset", "-c", LOAD_CPU, "redis-server", "--port", str(REDIS_PORT),
                                           "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL))
            time.sleep(0.5)
        all_cases = cases(args.set, tmp)
        files = []
        for i, (label, text, path, headers) in enumerate(all_cases):
            f = os.path.join(tmp, "case%d.yaml" % i)
            with open(f, "w") as fh:
                fh.write(text)
            files.append(f)
        os.makedirs(os.path.join(tmp, "nginx-proxy"))
        nginx_cmd = ["nginx", "-p", os.path.join(tmp, "nginx-proxy") + "/", "-c",
                     os.path.join(BENCH, "configs", "nginx-proxy.conf"), "-e", os.path.join(tmp, "nginx-proxy", "error.log")]
        results = {}
        for label, *_ in all_cases:
            results[label] = []
            if args.baseline:
                results[label + " (baseline)"] = []
        results["nginx proxy"] = []
        if args.set == "upstreams":
            results["nginx pool of 3"] = []
        if args.set == "compress":
            results["nginx proxy, 20 KB JSON"] = []
            results["nginx gzip 6"] = []
        started = time.time()
        for r in range(args.rounds):
            order = list(range(len(all_cases)))
            if r % 2:
                order.reverse()
            for i in order:
                label, _, path, headers = all_cases[i]
                binaries = [(label, args.turnpike)]
                if args.baseline:
                    binaries.append((label + " (baseline)", args.baseline))
                    if r % 2:
                        binaries.reverse()
                for name, binary in binaries:
                    res = run_case([binary, "run", "-c", files[i]], "http://127.0.0.1:%d%s" % (PORT, path),
                                   headers, args.duration)
                    results[name].append(res)
                    print("round %d %-45s %9.0f req/s %6.1f µs/req errors %d" % (r + 1, name, res["rps"], res["cpu_us"], res["errors"]),
                          file=sys.stderr)
            if args.set_only:
                continue
            res = run_case(nginx_cmd, "http://127.0.0.1:%d/items/7" % NGINX_PORT, [], args.duration)
            results["nginx proxy"].append(res)
            if args.set == "upstreams":
                res = run_case(nginx_pool_conf(tmp), "http://127.0.0.1:%d/items/7" % NGINX_PORT, [], args.duration)
                results["nginx pool of 3"].append(res)
            if args.set == "compress":
                for label, gz, hdrs in (("nginx proxy, 20 KB JSON", False, []),
                                        ("nginx gzip 6", True, [("Accept-Encoding", "gzip")])):
                    res = run_case(nginx_big_conf(tmp, gz), "http://127.0.0.1:%d/big.json" % NGINX_PORT, hdrs, args.duration)
                    results[label].append(res)
        elapsed = time.time() - started
        ref = all_cases[0][0]
        ref_rps = statistics.median(x["rps"] for x in results[ref])
        ref_cpu = statistics.median(x["cpu_us"] for x in results[ref])
        lines = ["%d rounds of %d s per case, interleaved (%.0f min); medians; one gateway worker on CPU %s, wrk -c50 and the nginx backend on CPU %s." %
                 (args.rounds, args.duration, elapsed / 60, SUT_CPU, LOAD_CPU), "",
                 "| case | req/s | × first | CPU µs/req | Δ CPU µs/req | errors |", "|---|--:|--:|--:|--:|--:|"]
        for label in list(results):
            if not results[label]:
                continue
            rps = statistics.median(x["rps"] for x in results[label])
            cpu = statistics.median(x["cpu_us"] for x in results[label])
            errs = sum(x["errors"] for x in results[label])
            lines.append("| %s | %.0f | %.3f | %.1f | %+.1f | %d |" % (label, rps, rps / ref_rps, cpu, cpu - ref_cpu, errs))
        if args.set == "upstreams":
            lines += ["", failover([args.turnpike, "run", "-c", files[3]], "http://127.0.0.1:%d/items/7" % PORT,
                                   backends[2014], args.duration,
                                   "Turnpike's pool with health checks and retries")]
            backends[2014] = start_backend(tmp, 2014, 2016)
            procs.append(backends[2014])
            lines += ["", failover(nginx_pool_conf(tmp), "http://127.0.0.1:%d/items/7" % NGINX_PORT,
                                   backends[2014], args.duration,
                                   "nginx's upstream block (defaults: `proxy_next_upstream error timeout`)")]
        report = "\n".join(lines) + "\n"
        print(report)
        if args.out:
            with open(args.out, "w") as f:
                f.write(report)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
