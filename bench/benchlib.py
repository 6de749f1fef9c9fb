#!/usr/bin/env python3
"""Helpers for bench/run.sh (standard library only).

Subcommands:
  ports-free PORT...      exit 1 (listing them) if any 127.0.0.1 port is in use
  proctree PID [--port P] JSON snapshot of the process tree rooted at PID:
                          CPU clock ticks (utime+stime of every process plus
                          cutime+cstime of its reaped children), CPU ns of its
                          live threads (schedstat), the sum of VmHWM (peak RSS)
                          in kB, and with --port the requests received so far
                          on the established connections to port P
  record ...              combine wrk output + two proctree snapshots + backend
                          accept counts into one JSON line (one benchmark run)
  report RUNS.jsonl       markdown tables (medians over rounds) for all cases
"""
import argparse
import errno
import json
import os
import re
import socket
import statistics
import sys
import time

# ---------------------------------------------------------------- ports-free


def cmd_ports_free(args):
    busy = []
    for port in args.ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Same option the servers use, so TIME_WAIT leftovers do not count.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                busy.append(port)
            else:
                raise
        finally:
            s.close()
    if busy:
        print(" ".join(str(p) for p in busy))
        return 1
    return 0


# ------------------------------------------------------------------ proctree


def _read_stat(pid):
    """(ppid, utime+stime, cutime+cstime) from /proc/PID/stat, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    # Field 2 (comm) may contain spaces/parens: split after the last ')'.
    rest = data[data.rindex(")") + 2:].split()
    # rest[0] is field 3 (state); field N is rest[N - 3].
    ppid = int(rest[1])
    own = int(rest[11]) + int(rest[12])          # fields 14 utime, 15 stime
    children = int(rest[13]) + int(rest[14])     # fields 16 cutime, 17 cstime
    return ppid, own, children


def _vm_hwm_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _sum_over_threads(pid, name, read):
    """The sum of `read(text)` over /proc/PID/task/*/NAME, for the threads alive now;
    threads that end while they are read, or whose file does not parse, count 0."""
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return 0
    total = 0
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/%s" % (pid, tid, name)) as f:
                total += read(f.read())
        except (OSError, ValueError, IndexError):
            pass
    return total


def _voluntary_switches(pid):
    """Times the process's threads went to sleep (blocked) so far: the sum of
    `voluntary_ctxt_switches` over /proc/PID/task/*/status. A server blocks when
    it runs out of work (in epoll_wait), so per request this counts its waits."""
    def read(text):
        m = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", text, re.M)
        return int(m.group(1)) if m else 0
    return _sum_over_threads(pid, "status", read)


def _cpu_ns(pid):
    """Nanoseconds the process's live threads have run: the first field of
    /proc/PID/task/*/schedstat. Finer than the 10 ms clock ticks of /proc/PID/stat,
    but without threads that have exited."""
    return _sum_over_threads(pid, "schedstat", lambda text: int(text.split()[0]))


def requests_in(port):
    """Requests received so far on the established TCP connections whose local port is
    `port`: the sum of their `data_segs_in` (from `ss -ti`). A keep-alive client that
    waits for each answer (wrk without pipelining) sends each request as one segment,
    and the TLS handshake's segments come before it, so the difference between two
    readings counts the requests between them, handshakes and connection setup left out.
    Connections that close between the readings are not counted."""
    import subprocess
    out = subprocess.run(["ss", "-tinH", "state", "established", "( sport = :%d )" % port],
                         capture_output=True, text=True, check=True).stdout
    return sum_data_segs_in(out)


def sum_data_segs_in(ss_output):
    """The sum of the `data_segs_in` fields in `ss -ti` output."""
    return sum(int(n) for n in re.findall(r"\bdata_segs_in:(\d+)", ss_output))


def proctree(root, port=None):
    stats = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _read_stat(int(name))
            if st is not None:
                stats[int(name)] = st
    if root not in stats:
        raise SystemExit("benchlib.py proctree: no process %d" % root)
    kids = {}
    for pid, (ppid, _, _) in stats.items():
        kids.setdefault(ppid, []).append(pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(kids.get(pid, []))
    ticks = sum(stats[p][1] + stats[p][2] for p in tree)
    hwm = sum(_vm_hwm_kb(p) for p in tree)
    sleeps = sum(_voluntary_switches(p) for p in tree)
    snap = {"pids": sorted(tree), "ticks": ticks, "cpu_ns": sum(_cpu_ns(p) for p in tree),
            "hwm_kb": hwm, "sleeps": sleeps, "time": time.monotonic()}
    if port is not None:
        snap["requests_in"] = requests_in(port)
    return snap


def cmd_proctree(args):
    print(json.dumps(proctree(args.pid, args.port)))
    return 0


# -------------------------------------------------------------------- record

_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}


def parse_wrk(text):
    """Parse `wrk --latency` output. Latencies are returned in ms."""
    out = {"requests": None, "rps": None, "p50_ms": None, "p75_ms": None,
           "p90_ms": None, "p99_ms": None, "non2xx": 0,
           "sock_connect": 0, "sock_read": 0, "sock_write": 0, "sock_timeout": 0}
    in_dist = False
    for line in text.splitlines():
        if "Latency Distribution" in line:
            in_dist = True
            continue
        if in_dist:
            m = re.match(r"^\s*(50|75|90|99)(?:\.0+)?%\s+([\d.]+)(us|ms|s|m|h)\s*$", line)
            if m:
                out["p%s_ms" % m.group(1)] = float(m.group(2)) * _UNIT_MS[m.group(3)]
                continue
            in_dist = False
        m = re.match(r"^\s*(\d+) requests in ", line)
        if m:
            out["requests"] = int(m.group(1))
        m = re.match(r"^\s*Requests/sec:\s+([\d.]+)", line)
        if m:
            out["rps"] = float(m.group(1))
        m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", line)
        if m:
            out["non2xx"] = int(m.group(1))
        m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", line)
        if m:
            (out["sock_connect"], out["sock_read"], out["sock_write"],
             out["sock_timeout"]) = (int(g) for g in m.groups())
    missing = [k for k in ("requests", "rps", "p50_ms", "p99_ms") if out[k] is None]
    if missing:
        raise SystemExit("benchlib.py: could not parse %s from wrk output" % ", ".join(missing))
    out["sock_errors"] = (out["sock_connect"] + out["sock_read"]
                          + out["sock_write"] + out["sock_timeout"])
    return out


def parse_h2load(text):
    """Parse h2load output: req/s, requests, errors; it reports no percentiles, so p50 is the
    mean request time and p99 is left empty."""
    out = {"requests": None, "rps": None, "p50_ms": None, "p75_ms": None, "p90_ms": None,
           "p99_ms": None, "non2xx": 0, "sock_connect": 0, "sock_read": 0, "sock_write": 0,
           "sock_timeout": 0}
    for line in text.splitlines():
        m = re.match(r"^finished in [\d.]+\w+, ([\d.]+) req/s", line)
        if m:
            out["rps"] = float(m.group(1))
        m = re.match(r"^requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout", line)
        if m:
            out["requests"] = int(m.group(3))
            out["non2xx"] = int(m.group(4))
            out["sock_read"] = int(m.group(5))
            out["sock_timeout"] = int(m.group(6))
        m = re.match(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", line)
        if m:
            out["non2xx"] += int(m.group(3)) + int(m.group(4))
        m = re.match(r"^time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)", line)
        if m:
            out["p50_ms"] = float(m.group(5)) * _UNIT_MS[m.group(6)]
    if out["requests"] is None or out["rps"] is None:
        raise SystemExit("benchlib.py: could not parse h2load output")
    out["sock_errors"] = out["sock_read"] + out["sock_timeout"]
    return out


def measure(before, after, whole_requests, clk_tck):
    """CPU, memory and request figures between two proctree snapshots of one run.

    Snapshots with request counts were taken while the load ran, after its connections were
    set up: the window holds keep-alive traffic only, requests are those counted on the port,
    and CPU comes in nanoseconds. Otherwise the snapshots bracket the whole load run
    (handshakes included): requests are `whole_requests` (the load tool's count) and CPU comes
    in clock ticks of `clk_tck` per second."""
    ticks = after["ticks"] - before["ticks"]
    wall = after.get("time", 0) - before.get("time", 0)
    window = "requests_in" in before and "requests_in" in after
    if window:
        requests = after["requests_in"] - before["requests_in"]
        cpu_s = (after["cpu_ns"] - before["cpu_ns"]) / 1e9
    else:
        requests = whole_requests
        cpu_s = ticks / float(clk_tck)
    return {
        "window": window, "window_s": wall, "requests": requests,
        "cpu_ticks": ticks, "cpu_s": cpu_s,
        "cpu_us_per_req": cpu_s * 1e6 / requests if requests else None,
        # share of one CPU used between the two snapshots
        "cpu_util_pct": 100.0 * cpu_s / wall if wall > 0 else None,
        "rss_mb": after["hwm_kb"] / 1024.0,
        # how often the system under test blocked for lack of work, per request
        "sleeps_per_req": ((after["sleeps"] - before["sleeps"]) / requests
                           if "sleeps" in before and "sleeps" in after and requests else None),
        "procs": len(after["pids"]),
    }


def percentile(sorted_values, p):
    """The nearest-rank p-th percentile (0 < p <= 100) of an ascending list, or None."""
    if not sorted_values:
        return None
    rank = max(1, -(-len(sorted_values) * p // 100))   # ceil(n * p / 100)
    return sorted_values[int(rank) - 1]


def h2load_log_stats(lines, since_us=None, percentiles=(50, 90, 95, 98, 99)):
    """Latency percentiles (ms) and status counts from h2load's --log-file: one request per
    line, `start time (µs since the epoch) TAB status TAB µs to the end of the response`.
    Requests that started before `since_us` (a warm-up) are left out; a status that is not a
    number (a failed request) counts as an error."""
    lat, ok, bad = [], 0, 0
    for line in lines:
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        try:
            start, dur = int(parts[0]), int(parts[2])
        except ValueError:
            continue
        if since_us is not None and start < since_us:
            continue
        try:
            status = int(parts[1])
        except ValueError:
            status = -1
        if 200 <= status < 300:
            ok += 1
        else:
            bad += 1
        lat.append(dur / 1000.0)
    lat.sort()
    out = {"logged": len(lat), "ok": ok, "errors": bad}
    for p in percentiles:
        out["p%d_ms" % p] = percentile(lat, p)
    return out


def cmd_record(args):
    with open(args.wrk) as f:
        text = f.read()
    w = parse_h2load(text) if "finished in" in text and "req/s" in text else parse_wrk(text)
    with open(args.before) as f:
        before = json.load(f)
    with open(args.after) as f:
        after = json.load(f)
    m = measure(before, after, w["requests"], args.clk_tck)
    window, wall, requests = m["window"], m["window_s"], m["requests"]
    rec = {
        "round": args.round, "case": args.case, "system": args.system,
        "url": args.url, "duration_s": args.duration,
        "upstream_conns": None,
    }
    rec.update((k, m[k]) for k in ("cpu_ticks", "cpu_s", "cpu_us_per_req", "cpu_util_pct",
                                   "rss_mb", "sleeps_per_req", "procs"))
    if args.accepts_before is not None and args.accepts_after is not None:
        # Each stub_status read is itself one accepted connection on the
        # backend: the `after` read adds 1 that is not the proxy's.
        rec["upstream_conns"] = max(0, args.accepts_after - args.accepts_before - 1)
    rec.update(w)
    if window:
        rec.update({"wrk_requests": w["requests"], "wrk_rps": w["rps"], "requests": requests,
                    "rps": requests / wall if wall > 0 else None, "window_s": wall})
    print(json.dumps(rec, sort_keys=True))
    if args.summary:
        sys.stderr.write(
            "[bench]   -> %.0f req/s, p50 %s ms, p99 %s ms, %s us/req CPU, "
            "%.0f%% CPU, RSS %.1f MB, upstream conns %s, errors %d\n" % (
                w["rps"], _fmt(w["p50_ms"], ".3f"), _fmt(w["p99_ms"], ".3f"),
                "%.1f" % rec["cpu_us_per_req"] if rec["cpu_us_per_req"] is not None else "-",
                rec["cpu_util_pct"] or 0, rec["rss_mb"],
                "-" if rec["upstream_conns"] is None else rec["upstream_conns"],
                w["non2xx"] + w["sock_errors"]))
    return 0


# -------------------------------------------------------------------- report

# case id -> (title, baseline system, label of the baseline in column heads)
CASES = [
    ("short", "Case 1: short-circuit (`return 200`, empty body)", "nginx", "nginx"),
    ("proxy", "Case 2: reverse proxy to the backend (1 KB JSON)", "nginx", "nginx"),
    ("routes", "Case 3: turnpike proxy, 10,000 APIs vs 1 API (`GET /bench/`)",
     "turnpike-1api", "1 API"),
    ("auth", "Case 4: Membrane scenario 3, basic auth + rate limiter vs plain proxying",
     "turnpike-plain", "plain"),
    ("matrix", "Case 5: APISIX matrix, apiKey / rateLimiter / both over 1 and 100 APIs, 100 consumers",
     "turnpike-plain-1", "plain, 1 API"),
    ("tls", "Case 6: TLS on both hops (Membrane scenario 4 shape), HTTP/1.1 keep-alive clients",
     "nginx-tls", "nginx TLS"),
    ("h2", "Case 7: HTTPS + HTTP/2 clients (h2load -m 10; p50 column = mean request time)",
     "nginx-h2", "nginx"),
    ("openapi", "Case 8 (Membrane's scenario 5): OpenAPI request validation, Fruitshop `POST /shop/v2/products` (Mangos)",
     "turnpike-proxy", "plain proxy"),
    ("jsonprot", "Case 9: jsonProtection (Membrane's defaults), `POST` Mangos",
     "turnpike-proxy", "plain proxy"),
    ("rest2soap", "Scenario 6: REST to SOAP (`wsdl2openapi`, POST /create-person, ~400-byte JSON) "
     "vs plain proxy of the SOAP request (target: at least 0.65)", "turnpike-plain", "plain proxy"),
    ("soapvalidate", "Scenario 7: SOAP proxy with xmlProtection and WSDL validation of request "
     "and response vs plain proxy (target: at least 0.60)", "turnpike-plain", "plain proxy"),
]
LABELS = {
    "turnpike": "turnpike",
    "nginx": "nginx",
    "haproxy": "HAProxy",
    "turnpike-1api": "turnpike, 1 API",
    "turnpike-10k": "turnpike, 10,000 APIs",
    "turnpike-plain": "turnpike, plain proxy",
    "turnpike-s3": "turnpike, basicAuthentication + rateLimiter",
    "turnpike-plainhttp": "turnpike, plain HTTP both hops",
    "turnpike-tlsclients": "turnpike, TLS to clients, plain HTTP to the backend",
    "turnpike-tls": "turnpike, TLS both hops",
    "turnpike-s4": "turnpike, TLS both hops + basicAuthentication + rateLimiter",
    "nginx-tls": "nginx, TLS both hops",
    "turnpike-h2": "turnpike, HTTPS h2 → HTTPS backend",
    "nginx-h2": "nginx, HTTPS h2 → HTTPS backend",
    "turnpike-proxy": "turnpike, plain proxy",
    "turnpike-openapi": "turnpike, validateRequests",
    "turnpike-jsonprot": "turnpike, jsonProtection",
    "turnpike-rest2soap": "turnpike, wsdl2openapi",
    "turnpike-validate": "turnpike, soapProxy + validation",
}
for _n in (1, 100):
    for _p, _l in (("plain", "no policy"), ("key", "apiKey"), ("limit", "rateLimiter"),
                   ("both", "apiKey + rateLimiter")):
        LABELS["turnpike-%s-%d" % (_p, _n)] = "turnpike, %s, %d API%s" % (_l, _n, "" if _n == 1 else "s")


# case id -> further baselines [(system, label)] compared with in the same round
EXTRA_BASES = {
    "tls": [("turnpike-plainhttp", "turnpike plain HTTP")],
}


def _per_round_table(case_runs, systems, ref, ref_label, labels):
    """Lines of a table of ratios to `ref` taken within each round, then their median.

    On a noisy machine the ratio of two medians mixes rounds run in different phases; runs
    of one round follow each other within seconds, so their ratio is steadier."""
    by_round = {}
    for r in case_runs:
        by_round.setdefault(r["round"], {})[r["system"]] = r
    rows = []
    for s in systems:
        if s == ref:
            continue
        rps, cpu = [], []
        for runs in by_round.values():
            a, b = runs.get(s), runs.get(ref)
            if a is None or b is None:
                continue
            if b["rps"]:
                rps.append(a["rps"] / b["rps"])
            if a["cpu_us_per_req"] is not None and b["cpu_us_per_req"]:
                cpu.append(a["cpu_us_per_req"] / b["cpu_us_per_req"])
        if rps:
            rows.append((s, rps, cpu))
    if not rows:
        return []
    out = ["Ratios to %s within each round (%d rounds), median and range:\n"
           % (ref_label, len(rows[0][1])),
           "| system | req/s vs %s | range | CPU/req vs %s | range |" % (ref_label, ref_label),
           "|---|--:|--:|--:|--:|"]
    for s, rps, cpu in rows:
        out.append("| %s | %s | %s | %s | %s |" % (
            labels.get(s, s), _fmt(_med(rps), ".3f"),
            "%.2f-%.2f" % (min(rps), max(rps)), _fmt(_med(cpu), ".3f"),
            "%.2f-%.2f" % (min(cpu), max(cpu)) if cpu else "-"))
    out.append("")
    return out


def _med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def _ratio(a, b):
    return None if a is None or not b else a / b


def cmd_report(args):
    runs = []
    with open(args.runs) as f:
        for line in f:
            if line.strip():
                runs.append(json.loads(line))
    labels = dict(LABELS)
    if args.nginx_label:
        labels["nginx"] = args.nginx_label
    if args.haproxy_label:
        labels["haproxy"] = args.haproxy_label
    out = []
    for case, title, base, base_label in CASES:
        case_runs = [r for r in runs if r["case"] == case]
        if not case_runs:
            continue
        systems = []
        for r in case_runs:
            if r["system"] not in systems:
                systems.append(r["system"])
        rounds = len({r["round"] for r in case_runs})
        agg = {}
        for s in systems:
            rs = [r for r in case_runs if r["system"] == s]
            agg[s] = {
                "n": len(rs),
                "rps": _med([r["rps"] for r in rs]),
                "p50": _med([r["p50_ms"] for r in rs]),
                "p99": _med([r["p99_ms"] for r in rs]),
                "cpu": _med([r["cpu_us_per_req"] for r in rs]),
                "sleeps": _med([r.get("sleeps_per_req") for r in rs]),
                "rss": _med([r["rss_mb"] for r in rs]),
                "up": _med([r["upstream_conns"] for r in rs]),
                "non2xx": sum(r["non2xx"] for r in rs),
                "sock": sum(r["sock_errors"] for r in rs),
            }
        b = agg.get(base)
        out.append("## %s\n" % title)
        out.append("Median of %d round%s; errors are totals over all rounds.\n"
                   % (rounds, "" if rounds == 1 else "s"))
        out.append("| system | req/s | req/s vs %s | p50 ms | p99 ms | CPU µs/req "
                   "| CPU/req vs %s | sleeps/req | RSS MB | upstream conns | errors |"
                   % (base_label, base_label))
        out.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        for s in systems:
            a = agg[s]
            errs = a["non2xx"] + a["sock"]
            err_txt = "0" if errs == 0 else "%d (non-2xx %d, socket %d)" % (errs, a["non2xx"], a["sock"])
            up = a["up"]
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                labels.get(s, s),
                _fmt(a["rps"], ".0f"),
                _fmt(_ratio(a["rps"], b and b["rps"]), ".2f"),
                _fmt(a["p50"], ".3f"),
                _fmt(a["p99"], ".3f"),
                _fmt(a["cpu"], ".1f"),
                _fmt(_ratio(a["cpu"], b and b["cpu"]), ".2f"),
                _fmt(a["sleeps"], ".3f"),
                _fmt(a["rss"], ".1f"),
                "-" if up is None else "%g" % up,
                err_txt))
        if b is None:
            out.append("\n(%s was not run, so ratio columns are empty.)" % labels.get(base, base))
        out.append("")
        for ref, ref_label in [(base, base_label)] + EXTRA_BASES.get(case, []):
            out.extend(_per_round_table(case_runs, systems, ref, ref_label, labels))

    out.append("## All runs\n")
    out.append("| round | case | system | requests | req/s | p50 ms | p99 ms | CPU s "
               "| CPU % | CPU µs/req | sleeps/req | RSS MB | procs | upstream conns | non-2xx "
               "| socket errors |")
    out.append("|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in runs:
        out.append("| %d | %s | %s | %d | %.0f | %s | %s | %.2f | %s | %s | %s | %.1f | %d | %s | %d | %d |" % (
            r["round"], r["case"], labels.get(r["system"], r["system"]), r["requests"],
            r["rps"], _fmt(r["p50_ms"], ".3f"), _fmt(r["p99_ms"], ".3f"), r["cpu_s"],
            _fmt(r["cpu_util_pct"], ".0f"), _fmt(r["cpu_us_per_req"], ".1f"),
            _fmt(r.get("sleeps_per_req"), ".3f"), r["rss_mb"], r["procs"],
            "-" if r["upstream_conns"] is None else r["upstream_conns"],
            r["non2xx"], r["sock_errors"]))
    out.append("")
    sys.stdout.write("\n".join(out))
    return 0


# ---------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description="helpers for bench/run.sh")
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("ports-free")
    p.add_argument("ports", type=int, nargs="+")
    p.set_defaults(func=cmd_ports_free)

    p = sub.add_parser("proctree")
    p.add_argument("pid", type=int)
    p.add_argument("--port", type=int, help="also count the requests received on this port")
    p.set_defaults(func=cmd_proctree)

    p = sub.add_parser("record")
    p.add_argument("--round", type=int, required=True)
    p.add_argument("--case", required=True)
    p.add_argument("--system", required=True)
    p.add_argument("--url", default="")
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--wrk", required=True)
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--clk-tck", type=int, default=os.sysconf("SC_CLK_TCK"))
    p.add_argument("--accepts-before", type=int)
    p.add_argument("--accepts-after", type=int)
    p.add_argument("--summary", action="store_true", help="one-line summary on stderr")
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("report")
    p.add_argument("runs")
    p.add_argument("--nginx-label")
    p.add_argument("--haproxy-label")
    p.set_defaults(func=cmd_report)

    args = ap.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
