#!/usr/bin/env python3
"""A runaway client against a backend of fixed capacity, side by side: Turnpike with a
concurrency limit and fair queues per client, Turnpike without them, and nginx with
`limit_req` + `limit_conn` per client as its documentation suggests.

The backend (in this script, asyncio) serves CAPACITY requests at once for SERVICE ms each; the
rest wait inside it, first come first served. Ten well-behaved clients send at a steady rate
(open loop) totalling half its capacity. Each system is measured calm (the ten alone), then
with a runaway client (wrk, 128 connections back to back, at machine speed, its own
X-Client-Id); with --slowdown, the backend's service time then becomes 5x longer while the
runaway goes on (Turnpike's adaptive limit in that phase). Reported per phase: the
well-behaved clients' goodput (share of their requests answered 200), p50 and p99 latency, and
the runaway's answered rate.

Usage: bench/overload.py [--phase-seconds S] [--turnpike PATH] [--slowdown] [--out FILE]
Needs nginx, wrk, taskset. The gateway runs on CPU 1, everything else on CPU 0.
"""

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
SUT_CPU, LOAD_CPU = "1", "0"
PORT, BACKEND, CONTROL = 2001, 2010, 2012
CAPACITY, SERVICE_MS = 8, 20
GOOD_CLIENTS = 10
# Half the capacity: CAPACITY / SERVICE requests per second, over ten clients.
GOOD_RATE = CAPACITY * 1000 / SERVICE_MS / 2 / GOOD_CLIENTS

BACKEND_PY = r'''
import asyncio, sys
capacity, service_ms, port, control = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
slots = asyncio.Semaphore(capacity)
state = {"ms": service_ms}

async def serve(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            async with slots:
                await asyncio.sleep(state["ms"] / 1000)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
    except Exception:
        writer.close()

async def slow(reader, writer):
    line = await reader.readline()
    state["ms"] = float(line.decode().strip() or service_ms)
    writer.close()

async def main():
    await asyncio.start_server(serve, "127.0.0.1", port, backlog=4096)
    await asyncio.start_server(slow, "127.0.0.1", control)
    await asyncio.Event().wait()

asyncio.run(main())
'''

GOOD_PY = r'''
import asyncio, json, sys, time
port, clients, rate, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])

async def client(i, out):
    # Open loop: request k is due at start + k / rate, whatever the answers before it (each on
    # a connection of its own, so that a slow answer does not hold the next request back).
    start = time.monotonic()
    n = 0
    pending = []
    while True:
        due = start + n / rate
        if due - start >= seconds:
            break
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        pending.append(asyncio.ensure_future(send(port, i, due, out)))
        n += 1
    await asyncio.gather(*pending)

async def send(port, i, due, out):
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        writer.write(("GET /work HTTP/1.1\r\nHost: bench\r\nX-Client-Id: good-%d\r\nConnection: close\r\n\r\n" % i).encode())
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 15)
        await asyncio.wait_for(reader.read(), 15)
        writer.close()
        code = int(status.split()[1]) if status else 0
    except Exception:
        code = 0
    out.append((code, time.monotonic() - due))

async def main():
    out = []
    await asyncio.gather(*(client(i, out) for i in range(clients)))
    print(json.dumps(out))

asyncio.run(main())
'''

NGINX_CONF = """daemon off;
master_process on;
worker_processes 1;
pid nginx.pid;
error_log error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path client_body;
    proxy_temp_path proxy;
    fastcgi_temp_path fastcgi;
    uwsgi_temp_path uwsgi;
    scgi_temp_path scgi;
    # Per client, as the limit_req and limit_conn documentation suggest: a request rate with a
    # burst served without delay, and connections per client.
    limit_req_zone $http_x_client_id zone=perclient:10m rate=%(rate)dr/s;
    limit_conn_zone $http_x_client_id zone=connperclient:10m;
    limit_req_status 429;
    limit_conn_status 429;
    upstream backend { server 127.0.0.1:%(backend)d; keepalive 256; }
    server {
        listen 127.0.0.1:%(port)d;
        location / {
            limit_req zone=perclient burst=%(burst)d nodelay;
            limit_conn connperclient %(conns)d;
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
"""


def turnpike_conf(concurrency):
    return """gateway: { threads: 1, accessLog: false }
---
api:
  port: %d
  ip: 127.0.0.1
  target:
    url: http://127.0.0.1:%d
    timeouts: { response: 60s }
%s""" % (PORT, BACKEND, concurrency)


FAIR = """    concurrency:
      limit: %d
      queue: { key: "${header.X-Client-Id}", maxPerKey: 64, maxTotal: 4096, timeout: 10s, targetDelay: 100ms, interval: 500ms }
""" % CAPACITY

ADAPTIVE = """    concurrency:
      limit: adaptive
      adaptive: { min: 2, max: 64, initial: %d, probeInterval: 5s }
      queue: { key: "${header.X-Client-Id}", maxPerKey: 64, maxTotal: 4096, timeout: 10s, targetDelay: 100ms, interval: 500ms }
""" % CAPACITY


def wait_up(port):
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/work" % port, timeout=2).read()
            return
        except Exception as e:  # noqa: BLE001 - any answer but a refused connection will do
            if hasattr(e, "code"):
                return
            time.sleep(0.1)
    sys.exit("port %d did not answer" % port)


def set_service(ms):
    import socket
    s = socket.create_connection(("127.0.0.1", CONTROL))
    s.sendall(b"%f\n" % ms)
    s.close()


def good_clients(seconds):
    return subprocess.Popen(["taskset", "-c", LOAD_CPU, sys.executable, "-c", GOOD_PY, str(PORT),
                             str(GOOD_CLIENTS), str(GOOD_RATE), str(seconds)], stdout=subprocess.PIPE)


def summarize(samples, seconds):
    lat = sorted(d for code, d in samples if code == 200)
    ok = len(lat)

    def pct(p):
        return lat[min(len(lat) - 1, int(p / 100 * len(lat)))] * 1000 if lat else float("nan")
    return {"sent": len(samples), "ok": ok, "goodput": ok / max(len(samples), 1),
            "p50_ms": pct(50), "p99_ms": pct(99), "errors": len(samples) - ok}


def runaway(seconds):
    return subprocess.Popen(["taskset", "-c", LOAD_CPU, "wrk", "-t1", "-c128", "-d%ds" % seconds,
                             "-H", "X-Client-Id: runaway", "http://127.0.0.1:%d/work" % PORT],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def wrk_rate(text):
    ok = total = 0.0
    for line in text.splitlines():
        if line.startswith("Requests/sec:"):
            total = float(line.split()[1])
        if "Non-2xx or 3xx responses:" in line:
            ok = float(line.split()[-1])
    return total, ok


def measure_system(label, cmd, seconds, slowdown):
    proc = subprocess.Popen(["taskset", "-c", SUT_CPU] + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    phases = {}
    try:
        wait_up(PORT)
        set_service(SERVICE_MS)
        g = good_clients(seconds)
        phases["calm"] = summarize(json.loads(g.communicate()[0]), seconds)
        names = ["runaway"] + (["runaway, backend 5x slower"] if slowdown else [])
        for name in names:
            if "slower" in name:
                set_service(SERVICE_MS * 5)
            w = runaway(seconds + 1)
            time.sleep(0.5)
            g = good_clients(seconds)
            phases[name] = summarize(json.loads(g.communicate()[0]), seconds)
            out = w.communicate()[0]
            rate, non2xx = wrk_rate(out)
            reqs = 0
            for line in out.splitlines():
                if "requests in" in line:
                    reqs = int(line.split()[0])
            phases[name]["runaway_rps"] = rate
            phases[name]["runaway_ok_rps"] = max(reqs - non2xx, 0) / (seconds + 1)
        set_service(SERVICE_MS)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    for name, p in phases.items():
        print("%-32s %-28s goodput %5.1f%%  p50 %7.1f ms  p99 %7.1f ms  runaway %8.0f req/s (%5.0f served)"
              % (label, name, 100 * p["goodput"], p["p50_ms"], p["p99_ms"], p.get("runaway_rps", 0),
                 p.get("runaway_ok_rps", 0)), file=sys.stderr)
    return phases


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phase-seconds", type=int, default=10)
    ap.add_argument("--turnpike", default=os.path.join(REPO, "target", "release", "turnpike"))
    ap.add_argument("--slowdown", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    for tool in ["nginx", "wrk", "taskset"]:
        if not shutil.which(tool):
            sys.exit("missing %s (bench/install-deps.sh)" % tool)
    tmp = tempfile.mkdtemp(prefix="turnpike-overload.")
    backend = subprocess.Popen(["taskset", "-c", LOAD_CPU, sys.executable, "-c", BACKEND_PY, str(CAPACITY),
                                str(SERVICE_MS), str(BACKEND), str(CONTROL)])
    results = {}
    try:
        time.sleep(0.5)
        files = {}
        for name, conc in (("fair", FAIR), ("plain", ""), ("adaptive", ADAPTIVE)):
            files[name] = os.path.join(tmp, name + ".yaml")
            with open(files[name], "w") as f:
                f.write(turnpike_conf(conc))
        os.makedirs(os.path.join(tmp, "nginx"))
        with open(os.path.join(tmp, "nginx", "nginx.conf"), "w") as f:
            # Each client may use its fair share of the backend: capacity / (clients + 1).
            share = CAPACITY * 1000 // SERVICE_MS // (GOOD_CLIENTS + 1)
            f.write(NGINX_CONF % {"rate": share, "burst": share, "conns": max(CAPACITY // 2, 1),
                                  "backend": BACKEND, "port": PORT})
        systems = [
            ("turnpike, fair queues (limit %d)" % CAPACITY, [args.turnpike, "run", "-c", files["fair"]]),
            ("turnpike, no limit", [args.turnpike, "run", "-c", files["plain"]]),
            ("nginx, limit_req + limit_conn", ["nginx", "-p", os.path.join(tmp, "nginx") + "/", "-c",
                                                os.path.join(tmp, "nginx", "nginx.conf"), "-e",
                                                os.path.join(tmp, "nginx", "error.log")]),
        ]
        if args.slowdown:
            systems.insert(1, ("turnpike, adaptive limit", [args.turnpike, "run", "-c", files["adaptive"]]))
        for label, cmd in systems:
            results[label] = measure_system(label, cmd, args.phase_seconds, args.slowdown)
    finally:
        backend.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print("| system | phase | good goodput | good p50 | good p99 | runaway offered | runaway served |")
    print("|---|---|---|---|---|---|---|")
    for label, phases in results.items():
        for name, p in phases.items():
            print("| %s | %s | %.1f%% | %.1f ms | %.1f ms | %s | %s |" % (
                label, name, 100 * p["goodput"], p["p50_ms"], p["p99_ms"],
                "%.0f req/s" % p["runaway_rps"] if "runaway_rps" in p else "—",
                "%.0f req/s" % p["runaway_ok_rps"] if "runaway_ok_rps" in p else "—"))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"capacity": CAPACITY, "service_ms": SERVICE_MS, "good_clients": GOOD_CLIENTS,
                       "good_rate_per_client": GOOD_RATE, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
