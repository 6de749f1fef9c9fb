#!/usr/bin/env python3
"""Apply rate and convergence of the control plane, and the data plane's speed while changes are
applied: the release binary with an admin listener, on one instance (files store) and on three
instances sharing an etcd. Each change is a `PUT /admin/v1/globals` whose global `setHeader`
gives every response a new `X-Version`; a change counts as applied on an instance once its API
answers with the new version (time from the start of the PUT, polled every 0.2 ms).

Usage: bench/control_plane.py [--changes N] [--duration S] [--rounds N] [--turnpike PATH]
Needs wrk, taskset and, for the fleet, etcd (Debian's etcd-server).
"""

import argparse
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import benchlib

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
TOKEN = "bench-token-0123456789"
ETCD_CLIENT, ETCD_PEER = 23790, 23800


def config(data_port, admin_port, store):
    return (
        "gateway: { threads: 1, accessLog: false }\n---\n"
        "admin:\n  listen: 127.0.0.1:%d\n  token: %s\n  store:\n%s"
        "---\napi:\n  name: bench%d\n  port: %d\n  ip: 127.0.0.1\n  flow: [ { return: { status: 200, body: ok } } ]\n"
        % (admin_port, TOKEN, store, data_port, data_port)
    )


def get_version(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        c.request("GET", "/x")
        r = c.getresponse()
        r.read()
        return r.getheader("x-version")
    finally:
        c.close()


def put_global(admin_port, version):
    body = "global:\n  - response:\n      - setHeader: { name: X-Version, value: %s }\n" % version
    c = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=10)
    try:
        c.request("PUT", "/admin/v1/globals", body=body,
                  headers={"authorization": "Bearer " + TOKEN, "content-type": "application/yaml"})
        r = c.getresponse()
        r.read()
        if r.status not in (200, 201):
            sys.exit("PUT answered %d" % r.status)
    finally:
        c.close()


def wait_up(port, deadline=30):
    end = time.time() + deadline
    while time.time() < end:
        try:
            get_version(port)
            return
        except OSError:
            time.sleep(0.05)
    sys.exit("port %d did not answer" % port)


def start(turnpike, tmp, i, store):
    d = os.path.join(tmp, "gw%d" % i)
    os.makedirs(d, exist_ok=True)
    f = os.path.join(d, "gateway.yaml")
    with open(f, "w") as fh:
        fh.write(config(2001 + i, 2091 + i, store(d)))
    log = open(os.path.join(d, "gateway.log"), "w")
    p = subprocess.Popen(["taskset", "-c", "1", turnpike, "run", "-c", f], stdout=log, stderr=log)
    try:
        wait_up(2001 + i)
    except SystemExit:
        with open(os.path.join(d, "gateway.log")) as fh:
            sys.stderr.write(fh.read()[-2000:])
        raise
    return p


def convergence(ports, admin, changes, tag):
    """Per change: seconds until each of `ports` serves it."""
    times = []
    for n in range(changes):
        version = "%s%d" % (tag, n)
        t0 = time.perf_counter()
        put_global(admin, version)
        for port in ports:
            while get_version(port) != version:
                time.sleep(0.0002)
        times.append(time.perf_counter() - t0)
    return times


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def wrk(port, seconds):
    out = subprocess.run(["taskset", "-c", "0", "wrk", "-t1", "-c50", "-d%ds" % seconds, "--latency",
                          "http://127.0.0.1:%d/x" % port], capture_output=True, text=True, check=True).stdout
    w = benchlib.parse_wrk(out)
    if w["non2xx"] or w["sock_errors"]:
        print("  wrk: %d non-2xx, %d socket errors" % (w["non2xx"], w["sock_errors"]), file=sys.stderr)
    return w["rps"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--changes", type=int, default=100)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--turnpike", default=os.path.join(REPO, "target", "release", "turnpike"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="turnpike-cp.")
    procs = []
    lines = []
    try:
        # One instance, documents stored in a folder.
        p = start(args.turnpike, tmp, 0, lambda d: "    dir: %s\n" % os.path.join(d, "store"))
        procs.append(p)
        one = convergence([2001], 2091, args.changes, "a")
        lines.append("| one instance (files) | %d | %.1f | %.1f | %.1f |" % (
            args.changes, statistics.median(one) * 1000, pct(one, 99) * 1000, max(one) * 1000))
        # The data plane while a change is applied every second, against no changes.
        quiet, busy = [], []
        for r in range(args.rounds):
            quiet.append(wrk(2001, args.duration))
            stop = threading.Event()

            def changer():
                k = 0
                while not stop.wait(1.0):
                    put_global(2091, "w%d-%d" % (r, k))
                    k += 1
            t = threading.Thread(target=changer)
            t.start()
            busy.append(wrk(2001, args.duration))
            stop.set()
            t.join()
        p.terminate()
        p.wait(10)
        procs.remove(p)
        # Three instances on one etcd.
        fleet = None
        if shutil.which("etcd"):
            etcd_dir = os.path.join(tmp, "etcd")
            procs.append(subprocess.Popen(
                ["taskset", "-c", "0", "etcd", "--data-dir", etcd_dir,
                 "--listen-client-urls", "http://127.0.0.1:%d" % ETCD_CLIENT,
                 "--advertise-client-urls", "http://127.0.0.1:%d" % ETCD_CLIENT,
                 "--listen-peer-urls", "http://127.0.0.1:%d" % ETCD_PEER,
                 "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % ETCD_PEER,
                 "--initial-cluster", "default=http://127.0.0.1:%d" % ETCD_PEER],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(1.5)
            store = lambda d: "    dir: %s\n    etcd: { endpoints: [\"http://127.0.0.1:%d\"], prefix: /bench }\n" % (
                os.path.join(d, "cache"), ETCD_CLIENT)
            for i in range(3):
                procs.append(start(args.turnpike, tmp, i, store))
            fleet = convergence([2001, 2002, 2003], 2091, args.changes, "f")
            lines.append("| three instances (etcd), all serving it | %d | %.1f | %.1f | %.1f |" % (
                args.changes, statistics.median(fleet) * 1000, pct(fleet, 99) * 1000, max(fleet) * 1000))
        print("| setup | changes | p50 ms | p99 ms | max ms |")
        print("|---|--:|--:|--:|--:|")
        print("\n".join(lines))
        print()
        print("| data plane, %d × %d s interleaved | req/s (median) | rounds |" % (args.rounds, args.duration))
        print("|---|--:|---|")
        print("| no changes | %.0f | %s |" % (statistics.median(quiet), ", ".join("%.0f" % q for q in quiet)))
        print("| a change every second | %.0f | %s |" % (statistics.median(busy), ", ".join("%.0f" % b for b in busy)))
        print("| ratio | %.3f | |" % (statistics.median(busy) / statistics.median(quiet)))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
