"""Markdown report and PNG charts of a bench/suite.py results folder.

The folder holds meta.json (machine, versions, mode, what could not run and why) and
runs.jsonl (one record per run); `write(folder)` adds report.md and the charts
(<suite>-rps.png, <suite>-cpu.png, <suite>-latency.png) next to them. Charts need matplotlib;
without it the report says so and has only tables.
"""
import json
import os
import statistics

SYSTEM_LABELS = {"turnpike": "turnpike", "nginx": "nginx", "haproxy": "HAProxy",
                 "caddy": "Caddy", "pingap": "Pingap"}
SYSTEM_ORDER = ["turnpike", "nginx", "haproxy", "caddy", "pingap"]
COLORS = {"turnpike": "#d62728", "turnpike-plain": "#f4a582", "nginx": "#2ca02c",
          "haproxy": "#1f77b4", "caddy": "#9467bd", "pingap": "#ff7f0e"}

MEMBRANE = [
    ("short", "1. Short-circuit (`return 200`, empty body, 350 in flight)", None),
    ("proxy", "2. Reverse proxy to the backend (1 KB JSON)", None),
    ("auth", "3. Basic authentication + rate limiter", 0.987),
    ("tls", "4. TLS on both hops + basic authentication + rate limiter", None),
    ("openapi", "5. OpenAPI request validation (`POST /shop/v2/products`)", 0.77),
    ("jsonprot", "5+. jsonProtection on the same POST (not one of Membrane's seven)", None),
    ("rest2soap", "6. REST to SOAP, person-service.wsdl", 0.55),
    ("soapvalidate", "7. SOAP validation of request and response, person-service.wsdl", 0.45),
    ("rest2soap-orders", "6b. REST to SOAP, order-service.wsdl (imported XSD)", 0.55),
    ("soapvalidate-orders", "7b. SOAP validation, order-service.wsdl (imported XSD)", 0.45),
]
SHORT_NAMES = {"short": "1 short", "proxy": "2 proxy", "auth": "3 auth+limit",
               "tls": "4 TLS+auth", "openapi": "5 OpenAPI", "jsonprot": "5+ jsonProt",
               "rest2soap": "6 REST→SOAP", "soapvalidate": "7 SOAP valid.",
               "rest2soap-orders": "6b REST→SOAP", "soapvalidate-orders": "7b SOAP valid."}
TARGETS = {"rest2soap": 0.65, "rest2soap-orders": 0.65, "soapvalidate": 0.60,
           "soapvalidate-orders": 0.60}
BASE_WORDS = {"short": None, "proxy": None, "auth": "own proxying (2)",
              "tls": "own plain proxying (2)", "openapi": "plain proxying of the same POST",
              "jsonprot": "plain proxying of the same POST",
              "rest2soap": "plain proxying of the same SOAP call",
              "soapvalidate": "plain proxying of the same SOAP call",
              "rest2soap-orders": "plain proxying of the same SOAP call",
              "soapvalidate-orders": "plain proxying of the same SOAP call"}
PLUGINS = [("none", "no plugin"), ("key", "key-auth"), ("limit", "limit-count"),
           ("both", "key-auth + limit-count")]


# ------------------------------------------------------------------ numbers


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def rsd(values):
    """Relative standard deviation (sample), in percent; None for fewer than 2 values."""
    values = [v for v in values if v is not None]
    if len(values) < 2:
        return None
    m = sum(values) / len(values)
    return 100.0 * statistics.stdev(values) / m if m else None


def ratio(a, b):
    return None if a is None or not b else a / b


def fmt(v, spec, none="—"):
    return none if v is None else format(v, spec)


def fmt_int(v):
    return "—" if v is None else "{:,.0f}".format(v)


class Agg:
    """The runs of one (suite, case, variant, system) over the rounds."""

    def __init__(self, recs, center):
        self.recs = recs
        self.n = len(recs)
        c = mean if center == "mean" else median
        self.rps = c([r["rps"] for r in recs])
        self.rps_rsd = rsd([r["rps"] for r in recs])
        self.cpu = c([r.get("cpu_us_per_req") for r in recs])
        self.cpu_rsd = rsd([r.get("cpu_us_per_req") for r in recs])
        self.util = c([r.get("cpu_util_pct") for r in recs])
        self.p = {p: c([r.get("p%d_ms" % p) for r in recs]) for p in (50, 90, 95, 98, 99)}
        self.rss = max(r["rss_mb"] for r in recs)
        self.errors = sum(r["errors"] for r in recs)
        self.requests = sum(r["requests"] for r in recs)
        self.error_rate = self.errors / float(self.requests) if self.requests else None
        self.up = c([r.get("upstream_conns") for r in recs])
        self.label = recs[0].get("label")


def group(runs, center):
    by = {}
    for r in runs:
        by.setdefault((r["suite"], r["case"], r["variant"], r["system"]), []).append(r)
    return {k: Agg(v, center) for k, v in by.items()}


def base_of(aggs, suite, base, system):
    """The aggregate a run's "vs own" ratio is taken against: `base` is a case, or case/variant."""
    case, _, variant = base.partition("/")
    for (s, c, v, sy), a in aggs.items():
        if s == suite and c == case and sy == system and (not variant or v == variant):
            return a
    return None


# -------------------------------------------------------------------- report


def write(folder):
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    runs = []
    path = os.path.join(folder, "runs.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            runs = [json.loads(line) for line in f if line.strip()]
    charts = Charts(folder)
    out = header(meta)
    if charts.missing:
        out.append("Charts: not drawn, %s.\n" % charts.missing)
    suites = [s for s in ("membrane", "apisix", "wso2") if any(r["suite"] == s for r in runs)
              or any(k["suite"] == s for k in meta.get("skips", []))]
    for suite in suites:
        srun = [r for r in runs if r["suite"] == suite]
        skips = [k for k in meta.get("skips", []) if k["suite"] == suite]
        out += {"membrane": membrane, "apisix": apisix, "wso2": wso2}[suite](srun, skips, meta, charts)
    if meta.get("failures"):
        out.append("## Runs that failed\n")
        out.append("| suite | case | system | round | error |")
        out.append("|---|---|---|--:|---|")
        for f in meta["failures"]:
            out.append("| %s | %s | %s | %d | %s |" % (f["suite"], f["case"], f["system"], f["round"],
                                                    f["error"].replace("\n", " ").replace("|", "\\|")))
        out.append("")
    out += configs_section(meta, runs)
    out += all_runs(runs)
    report = os.path.join(folder, "report.md")
    with open(report, "w") as f:
        f.write("\n".join(out) + "\n")
    return report


def header(meta):
    m = meta["machine"]
    v = m["versions"]
    sw = []
    for key, name in (("turnpike", "turnpike"), ("nginx", "nginx"), ("haproxy", "HAProxy"),
                      ("caddy", "Caddy"), ("pingap", "Pingap"), ("h2load", "h2load (nghttp2)")):
        if v.get(key):
            sw.append("%s %s" % (name, v[key]))
        elif key in meta.get("absent", {}):
            sw.append("%s: %s" % (name, meta["absent"][key]))
    prof = meta["profiles"]
    mode = meta["mode"]
    elapsed = meta.get("elapsed_s", 0)
    lines = [
        "# Turnpike benchmark suites: %s (%s)" % (", ".join(meta["suites"]), mode),
        "",
        "- Machine: %s CPUs, %s, kernel %s" % (m["cpus"], m["cpu"], m["kernel"]),
        "- Software: %s" % "; ".join(sw),
        "- Commit: %s" % m["commit"],
        "- Command: `%s`" % meta.get("command", "?"),
        "- Ran for %d min %02d s (%s mode: membrane %s requests after %s warm-up requests, "
        "%s round(s); apisix %s s after %s s warm-up, %s round(s); wso2 %s s after %s s, "
        "%s round(s))" % (
            elapsed // 60, elapsed % 60, mode, "{:,}".format(prof["membrane"]["requests"]),
            "{:,}".format(prof["membrane"]["warmup"]), prof["membrane"]["rounds"],
            prof["apisix"]["duration"], prof["apisix"]["warmup"], prof["apisix"]["rounds"],
            prof["wso2"]["duration"], prof["wso2"]["warmup"], prof["wso2"]["rounds"]),
        "- Method: each system in a fresh process pinned to CPU 1 with one worker (turnpike "
        "`gateway.threads: 1`, nginx `worker_processes 1`, HAProxy `nbthread 1`, Caddy "
        "`GOMAXPROCS=1`, Pingap `threads = 1`; the wso2 suite sweeps them); the load generator "
        "(`h2load --h1`, one thread, keep-alive) and the nginx backends on CPU 0. CPU per request "
        "is the system's own (user + kernel, its network work included), RSS its peak. Systems "
        "alternate within each round. See docs/benchmarks.md.",
        "",
    ]
    if mode != "full":
        lines.insert(-1, "- **%s run**: too short for stable figures; for checking the harness "
                     "and the setup only." % mode.capitalize())
    return lines


def skip_rows(skips, case, ncols):
    """Table rows of "—" for the systems that could not run `case`, and the reasons as
    lines to print under the table."""
    rows, notes = [], {}
    for k in skips:
        if k["case"] == case:
            name = SYSTEM_LABELS.get(k["system"], k["system"])
            rows.append("| %s |%s" % (name, " — |" * (ncols - 1)))
            notes.setdefault(k["reason"], []).append(name)
    lines = ["— %s: %s." % (", ".join(names), reason) for reason, names in notes.items()]
    return rows, lines


def fast_path_misses(aggs, case):
    """The line saying how often Turnpike's SOAP fast paths declined in `case`, and why."""
    recs = [r for k, a in aggs.items() if k[1] == case and k[3] == "turnpike"
            for r in a.recs if "fast_path_misses" in r]
    if not recs:
        return None
    sent = sum(r.get("requests", 0) for r in recs)
    total = {}
    for r in recs:
        for reason, n in r["fast_path_misses"].items():
            total[reason] = total.get(reason, 0) + n
    if not total:
        return ("Fast-path misses: none — every message of the %s measured requests (and the "
                "warm-up) took the fast paths." % "{:,}".format(sent))
    return ("Fast-path misses by reason (`turnpike_soap_fast_path_misses_total`, warm-up "
            "included; %s measured requests): %s." % (
                "{:,}".format(sent),
                ", ".join("%s %s" % (k, "{:,}".format(v)) for k, v in sorted(total.items()))))


def membrane(runs, skips, meta, charts):
    aggs = group(runs, "mean")
    out = ["## Membrane's scenarios\n",
           "Membrane's method: %s requests at a fixed concurrency (100 in flight, 350 for the "
           "short-circuit) after %s uncounted warm-up requests, %d round(s); figures are means over "
           "the rounds with their relative standard deviation (RSD). CPU per request covers the "
           "measured requests (connection setup included, which matters only for TLS). *vs own* "
           "is the ratio to the same system's baseline named in each section; *vs nginx* to "
           "nginx in the same scenario.\n" % (
               "{:,}".format(meta["profiles"]["membrane"]["requests"]),
               "{:,}".format(meta["profiles"]["membrane"]["warmup"]),
               meta["profiles"]["membrane"]["rounds"])]
    summary = []
    for case, title, published in MEMBRANE:
        keys = [k for k in aggs if k[1] == case]
        if not keys and not any(s["case"] == case for s in skips):
            continue
        keys.sort(key=lambda k: (k[2] != "plain", SYSTEM_ORDER.index(k[3])))
        out.append("### %s\n" % title)
        words = BASE_WORDS.get(case)
        if words:
            out.append("*vs own*: against %s." % words + (
                " Membrane's published ratio: %.3g×." % published if published else "") + (
                " Target: at least %.2f×." % TARGETS[case] if case in TARGETS else "") + "\n")
        out.append("| system | req/s | RSD | vs own | vs nginx | CPU µs/req | RSD | CPU vs own "
                   "| CPU vs nginx | p50 ms | p99 ms | RSS MB | errors |")
        out.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        ng = aggs.get(("membrane", case, "", "nginx"))
        for k in keys:
            a = aggs[k]
            own = None
            rec0 = a.recs[0]
            if rec0.get("base"):
                own = base_of(aggs, "membrane", rec0["base"], k[3])
            label = a.label or SYSTEM_LABELS[k[3]]
            vs_own = ratio(a.rps, own.rps) if own else (1.0 if case == "proxy" or k[2] == "plain" else None)
            cpu_own = ratio(a.cpu, own.cpu) if own else (1.0 if case == "proxy" or k[2] == "plain" else None)
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                label, fmt_int(a.rps), fmt(a.rps_rsd, ".1f") + ("%" if a.rps_rsd is not None else ""),
                fmt(vs_own, ".3f"), fmt(ratio(a.rps, ng and ng.rps), ".2f"),
                fmt(a.cpu, ".1f"), fmt(a.cpu_rsd, ".1f") + ("%" if a.cpu_rsd is not None else ""),
                fmt(cpu_own, ".3f"), fmt(ratio(a.cpu, ng and ng.cpu), ".2f"),
                fmt(a.p[50], ".3f"), fmt(a.p[99], ".3f"), fmt(a.rss, ".1f"), a.errors))
            if own and case != "proxy":
                summary.append((case, k[3], vs_own, cpu_own))
        rows, notes = skip_rows(skips, case, 13)
        out += rows
        out.append("")
        if notes:
            out.append("<br>".join(notes) + "\n")
        misses = fast_path_misses(aggs, case)
        if misses:
            out.append(misses + "\n")
    if summary:
        out.append("### Against each system's own proxying, beside Membrane's published ratios\n")
        out.append("req/s as a share of the same system's baseline (CPU per request in brackets, "
                   "as a multiple of the baseline's).\n")
        systems = [s for s in SYSTEM_ORDER if any(x[1] == s for x in summary)]
        out.append("| scenario | Membrane (published) | %s |" % " | ".join(SYSTEM_LABELS[s] for s in systems))
        out.append("|---|--:|%s" % ("--:|" * len(systems)))
        for case, title, published in MEMBRANE:
            row = [x for x in summary if x[0] == case]
            if not row:
                continue
            cells = []
            for s in systems:
                x = [y for y in row if y[1] == s]
                cells.append("%s (%s)" % (fmt(x[0][2], ".3f"), fmt(x[0][3], ".2f")) if x else "—")
            out.append("| %s | %s | %s |" % (SHORT_NAMES[case], fmt(published, ".3g"), " | ".join(cells)))
        out.append("")
    out += charts.membrane(aggs)
    return out


def apisix(runs, skips, meta, charts):
    aggs = group(runs, "median")
    prof = meta["profiles"]["apisix"]
    out = ["## APISIX's matrix\n",
           "1 and 100 routes × {no plugin, key-auth, limit-count, both}, 100 consumers, one "
           "worker, %d connections, the request on the last route; with a mocked backend (each "
           "system answers itself: turnpike `return`, HAProxy `http-request return`, Caddy "
           "`respond`, Pingap `mock`, nginx a cached static file, since its `return` would run "
           "before `limit_req` and the access phase) and with the real backend (nginx on CPU 0). "
           "%d s after %d s of warm-up, medians of %d round(s); requests and CPU counted in a "
           "window inside the measured part. *× none*: req/s against the same system's no-plugin "
           "run with the same routes and backend. APISIX's published limit-count: 0.80–0.87× of "
           "its no-plugin req/s.\n" % (
               runs[0]["concurrency"] if runs else 50, prof["duration"], prof["warmup"], prof["rounds"])]
    systems = [s for s in SYSTEM_ORDER if any(k[3] == s for k in aggs)]
    for backend, title in (("mock", "Mocked backend"), ("real", "Real backend")):
        if not any(k[2].startswith(backend + "-") for k in aggs):
            continue
        out.append("### %s\n" % title)
        out.append("| routes | plugins | %s |" % " | ".join(
            "%s req/s | × none | CPU µs/req" % SYSTEM_LABELS[s] for s in systems))
        out.append("|--:|---|%s" % ("--:|--:|--:|" * len(systems)))
        for routes in (1, 100):
            for pl, pl_label in PLUGINS:
                variant = "%s-%d-%s" % (backend, routes, pl)
                cells = []
                any_cell = False
                for s in systems:
                    a = aggs.get(("apisix", variant, variant, s))
                    if a is None:
                        reason = [k["reason"] for k in skips if k["variant"] == variant and k["system"] == s]
                        cells.append("— | | " if not reason else "— | | ")
                        continue
                    any_cell = True
                    none = aggs.get(("apisix", "%s-%d-none" % (backend, routes),
                                     "%s-%d-none" % (backend, routes), s))
                    cells.append("%s | %s | %s" % (fmt_int(a.rps), fmt(ratio(a.rps, none and none.rps), ".3f"),
                                                   fmt(a.cpu, ".1f")))
                if any_cell:
                    out.append("| %d | %s | %s |" % (routes, pl_label, " | ".join(cells)))
        out.append("")
    reasons = {}
    for k in skips:
        reasons.setdefault((k["system"], k["reason"]), []).append(k["variant"])
    if reasons:
        out.append("Not run (—): " + "; ".join(
            "%s for %s: %s" % (SYSTEM_LABELS.get(s, s), ", ".join(sorted(set(
                v.split("-", 2)[2] for v in vs))), r) for (s, r), vs in sorted(reasons.items())) + ".\n")
    out.append("Latency and errors (medians over rounds; errors are totals):\n")
    out.append("| backend, routes, plugins | system | req/s | vs nginx | p50 ms | p99 ms | CPU % | RSS MB | errors |")
    out.append("|---|---|--:|--:|--:|--:|--:|--:|--:|")
    for k in sorted(aggs, key=lambda k: (k[2].split("-")[0], int(k[2].split("-")[1]),
                                         [p for p, _ in PLUGINS].index(k[2].split("-")[2]),
                                         SYSTEM_ORDER.index(k[3]))):
        a = aggs[k]
        ng = aggs.get(("apisix", k[1], k[2], "nginx"))
        b, n, p = k[2].split("-")
        out.append("| %s, %s, %s | %s | %s | %s | %s | %s | %s | %s | %d |" % (
            b, n, dict(PLUGINS)[p], SYSTEM_LABELS[k[3]], fmt_int(a.rps),
            fmt(ratio(a.rps, ng and ng.rps), ".2f"), fmt(a.p[50], ".3f"), fmt(a.p[99], ".3f"),
            fmt(a.util, ".0f"), a.rss, a.errors))
    out.append("")
    out += charts.apisix(aggs)
    return out


def wso2(runs, skips, meta, charts):
    aggs = group(runs, "median")
    prof = meta["profiles"]["wso2"]
    out = ["## WSO2's API with 8 routes\n",
           "One API with 8 routes (`/svc/r1/` … `/svc/r8/`, proxied to the backend), 1,000 "
           "concurrent keep-alive connections cycling over the 8 routes, %d s after %d s of "
           "warm-up, medians of %d round(s). Worker threads are swept over the cores: with 1 the "
           "system runs on CPU 1, with more on CPUs 0–(N−1), sharing CPU 0 with the load and the "
           "backend, so on a 2-core machine the second thread competes with the load generator. "
           "WSO2 reports the scaling of its router over concurrency; here *× 1 thread* is req/s "
           "against the same system with one thread.\n" % (
               prof["duration"], prof["warmup"], prof["rounds"])]
    out.append("| threads | system | req/s | vs nginx | × 1 thread | CPU µs/req | p50 ms | p90 ms "
               "| p95 ms | p98 ms | p99 ms | error rate | RSS MB |")
    out.append("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for k in sorted(aggs, key=lambda k: (int(k[2]), SYSTEM_ORDER.index(k[3]))):
        a = aggs[k]
        ng = aggs.get(("wso2", k[1], k[2], "nginx"))
        one = aggs.get(("wso2", "threads-1", "1", k[3]))
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            k[2], SYSTEM_LABELS[k[3]], fmt_int(a.rps), fmt(ratio(a.rps, ng and ng.rps), ".2f"),
            fmt(ratio(a.rps, one and one.rps), ".2f"), fmt(a.cpu, ".1f"),
            fmt(a.p[50], ".2f"), fmt(a.p[90], ".2f"), fmt(a.p[95], ".2f"), fmt(a.p[98], ".2f"),
            fmt(a.p[99], ".2f"), fmt(a.error_rate and 100 * a.error_rate, ".3f", "0") + (
                "%" if a.error_rate else ""), fmt(a.rss, ".1f")))
    out.append("")
    seen = []
    for k in skips:
        line = "- %s: %s" % (SYSTEM_LABELS.get(k["system"], k["system"]), k["reason"])
        if line not in seen:
            seen.append(line)
    out += seen
    if skips:
        out.append("")
    out += charts.wso2(aggs)
    return out


def configs_section(meta, runs):
    out = ["## Configs\n"]
    by_system = {}
    for r in runs:
        for c in r.get("configs", []):
            by_system.setdefault(r["system"], set()).add(c)
    for s in SYSTEM_ORDER:
        if s not in by_system:
            continue
        fixed = sorted(c for c in by_system[s] if c.startswith("bench/"))
        gen = sorted((c for c in by_system[s] if not c.startswith("bench/")),
                     key=lambda c: (c.endswith((".json", ".map")), c))
        parts = ["`%s`" % c for c in fixed]
        if gen:
            parts.append("%d generated by `bench/suite_configs.py`, copied beside this report "
                         "(e.g. `%s`)" % (len(gen), gen[0]))
        out.append("- %s: %s" % (SYSTEM_LABELS[s], ", ".join(parts)))
    out.append("- backends: `bench/configs/nginx-backend.conf`, `bench/configs/nginx-tls-backend.conf.in`")
    out.append("")
    return out


def all_runs(runs):
    out = ["## All runs\n",
           "| suite | case | system | round | requests | req/s | CPU µs/req | CPU % | p50 ms | p99 ms | RSS MB | upstream conns | errors |",
           "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in runs:
        out.append("| %s | %s | %s | %d | %d | %.0f | %s | %s | %s | %s | %.1f | %s | %d |" % (
            r["suite"], r["case"] + ("/" + r["variant"] if r["variant"] and r["variant"] != r["case"]
                                     and r["suite"] == "membrane" else ""),
            SYSTEM_LABELS[r["system"]], r["round"], r["requests"], r["rps"],
            fmt(r.get("cpu_us_per_req"), ".1f"), fmt(r.get("cpu_util_pct"), ".0f"),
            fmt(r.get("p50_ms"), ".3f"), fmt(r.get("p99_ms"), ".3f"), r["rss_mb"],
            fmt(r.get("upstream_conns"), "g"), r["errors"]))
    out.append("")
    return out


# -------------------------------------------------------------------- charts


class Charts:
    def __init__(self, folder):
        self.folder = folder
        self.missing = None
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            self.plt = plt
        except ImportError:
            self.plt = None
            self.missing = "matplotlib is not installed (`python3 -m pip install matplotlib`, " \
                           "done by bench/install-deps.sh)"

    def save(self, fig, name):
        fig.tight_layout()
        fig.savefig(os.path.join(self.folder, name), dpi=80)
        self.plt.close(fig)
        return "![%s](%s)" % (name[:-4], name)

    def bars(self, ax, groups, series, value, ylabel, title):
        """Grouped bars: one group per x label, one bar per series that has a value."""
        width = 0.8 / max(1, len(series))
        for i, (key, label, color) in enumerate(series):
            xs, ys = [], []
            for j, g in enumerate(groups):
                v = value(g, key)
                if v is not None:
                    xs.append(j - 0.4 + width * (i + 0.5))
                    ys.append(v)
            if xs:
                ax.bar(xs, ys, width, label=label, color=color)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([g[1] for g in groups], rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)

    def membrane(self, aggs):
        if not self.plt or not aggs:
            return []
        groups = [(c, SHORT_NAMES[c]) for c, _, _ in MEMBRANE if any(k[1] == c for k in aggs)]

        def pick(case, key):
            for (s, c, v, sy), a in aggs.items():
                if c == case and ((key == "turnpike-plain" and sy == "turnpike" and v == "plain")
                                  or (key != "turnpike-plain" and sy == key and v != "plain")):
                    return a
            return None
        series = [(s, SYSTEM_LABELS[s], COLORS[s]) for s in SYSTEM_ORDER
                  if any(k[3] == s for k in aggs)]
        if any(k[2] == "plain" for k in aggs):
            series.insert(1, ("turnpike-plain", "turnpike, plain proxy of the same request",
                              COLORS["turnpike-plain"]))
        md = ["### Charts\n"]
        for name, attr, ylabel in (("membrane-rps.png", "rps", "requests/s"),
                                   ("membrane-cpu.png", "cpu", "CPU µs per request")):
            fig, ax = self.plt.subplots(figsize=(10, 3.8))
            self.bars(ax, groups, series, lambda g, k: getattr(pick(g[0], k), attr, None),
                      ylabel, "Membrane's scenarios: %s (one core each)" % ylabel)
            ax.legend(fontsize=7, ncol=3)
            md.append(self.save(fig, name))
        fig, axes = self.plt.subplots(1, 2, figsize=(10, 3.8))
        for ax, p in zip(axes, (50, 99)):
            self.bars(ax, groups, series, lambda g, k, p=p: (pick(g[0], k).p[p] if pick(g[0], k) else None),
                      "ms", "p%d latency" % p)
        axes[0].legend(fontsize=7)
        md.append(self.save(fig, "membrane-latency.png"))
        md.append("")
        return md

    def apisix(self, aggs):
        if not self.plt or not aggs:
            return []
        series = [(s, SYSTEM_LABELS[s], COLORS[s]) for s in SYSTEM_ORDER
                  if any(k[3] == s for k in aggs)]
        md = ["### Charts\n"]
        for name, fn, ylabel in (("apisix-rps.png", lambda a: a.rps, "requests/s"),
                                 ("apisix-cpu.png", lambda a: a.cpu, "CPU µs per request"),
                                 ("apisix-latency.png", lambda a: a.p[99], "p99 ms")):
            backends = [b for b in ("mock", "real") if any(k[2].startswith(b + "-") for k in aggs)]
            fig, axes = self.plt.subplots(1, len(backends), figsize=(10, 3.8), squeeze=False)
            for ax, b in zip(axes[0], backends):
                groups = [("%s-%d-%s" % (b, n, p), "%d, %s" % (n, pl)) for n in (1, 100)
                          for p, pl in PLUGINS]
                self.bars(ax, groups, series,
                          lambda g, k: (fn(aggs[("apisix", g[0], g[0], k)])
                                        if ("apisix", g[0], g[0], k) in aggs else None),
                          ylabel, "APISIX matrix, %s backend: %s" % (
                              "mocked" if b == "mock" else "real", ylabel))
            axes[0][0].legend(fontsize=7)
            md.append(self.save(fig, name))
        md.append("")
        return md

    def wso2(self, aggs):
        if not self.plt or not aggs:
            return []
        series = [(s, SYSTEM_LABELS[s], COLORS[s]) for s in SYSTEM_ORDER
                  if any(k[3] == s for k in aggs)]
        threads = sorted({int(k[2]) for k in aggs})
        groups = [(t, "%d thread%s" % (t, "" if t == 1 else "s")) for t in threads]

        def get(t, s):
            return aggs.get(("wso2", "threads-%d" % t, str(t), s))
        md = ["### Charts\n"]
        fig, axes = self.plt.subplots(1, 2, figsize=(10, 3.8))
        self.bars(axes[0], groups, series, lambda g, k: getattr(get(g[0], k), "rps", None),
                  "requests/s", "8 routes, 1,000 connections: req/s")
        self.bars(axes[1], groups, series, lambda g, k: getattr(get(g[0], k), "cpu", None),
                  "CPU µs per request", "CPU per request")
        axes[0].legend(fontsize=7)
        md.append(self.save(fig, "wso2-rps.png"))
        fig, axes = self.plt.subplots(1, len(threads), figsize=(10, 3.8), squeeze=False)
        pcts = (50, 90, 95, 98, 99)
        for ax, t in zip(axes[0], threads):
            for key, label, color in series:
                a = get(t, key)
                if a is not None and a.p[50] is not None:
                    ax.plot(range(len(pcts)), [a.p[p] for p in pcts], marker="o", label=label,
                            color=color)
            ax.set_xticks(range(len(pcts)))
            ax.set_xticklabels(["p%d" % p for p in pcts])
            ax.set_ylabel("ms")
            ax.set_title("latency percentiles, %d thread%s" % (t, "" if t == 1 else "s"), fontsize=10)
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=7)
        md.append(self.save(fig, "wso2-latency.png"))
        md.append("")
        return md

