"""Tests of the benchmark suites (bench/suite.py, suite_configs.py, suite_report.py): the
arithmetic, the parsing of h2load's output and request log, the plans, the generated configs
(checked by nginx -t, haproxy -c, caddy validate and turnpike validate where those are
installed) and the report. Run with the harness's other tests (cargo test runs them, see
crates/turnpike/tests/bench_harness.rs):
python3 -m unittest discover -s bench -p 'test_*.py'"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import xml.dom.minidom

import benchlib
import suite
import suite_configs as sc
import suite_report

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

H2LOAD_OUTPUT = """starting benchmark...
spawning thread #0: 100 total client(s). 20000 total requests
Application protocol: http/1.1
progress: 100% done

finished in 357.85ms, 55889.36 req/s, 62.89MB/s
requests: 20000 total, 20000 started, 19998 done, 19990 succeeded, 10 failed, 2 errored, 0 timeout
status codes: 19990 2xx, 0 3xx, 6 4xx, 2 5xx
traffic: 22.50MB (23590000) total, 1.23MB (1290000) headers (space savings 0.00%), 20.99MB (22010000) data
                     min         max         mean         sd        +/- sd
time for request:       98us     10.64ms      1.60ms       983us    85.15%
"""


def turnpike_binary():
    for path in (os.environ.get("TURNPIKE_BIN"),
                 os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")),
                              "debug", "turnpike"),
                 os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")),
                              "release", "turnpike")):
        if path and os.access(path, os.X_OK):
            return path
    return None


class Arithmetic(unittest.TestCase):
    def test_nearest_rank_percentiles(self):
        values = list(range(1, 101))
        self.assertEqual(benchlib.percentile(values, 50), 50)
        self.assertEqual(benchlib.percentile(values, 99), 99)
        self.assertEqual(benchlib.percentile(values, 100), 100)
        self.assertEqual(benchlib.percentile([7], 98), 7)
        self.assertEqual(benchlib.percentile([1, 2, 3], 50), 2)
        self.assertIsNone(benchlib.percentile([], 50))

    def test_relative_standard_deviation_and_centres(self):
        self.assertAlmostEqual(suite_report.rsd([90, 100, 110]), 10.0)
        self.assertIsNone(suite_report.rsd([100]))
        self.assertIsNone(suite_report.rsd([None, 100]))
        self.assertEqual(suite_report.mean([1, None, 3]), 2)
        self.assertEqual(suite_report.median([5, 1, 3]), 3)
        self.assertIsNone(suite_report.ratio(1, 0))
        self.assertAlmostEqual(suite_report.ratio(3, 4), 0.75)

    def test_a_whole_run_counts_the_load_tools_requests_and_ticks(self):
        before = {"pids": [1, 2], "ticks": 100, "cpu_ns": 0, "hwm_kb": 2048, "sleeps": 0,
                  "time": 10.0}
        after = {"pids": [1, 2], "ticks": 300, "cpu_ns": 0, "hwm_kb": 4096, "sleeps": 50,
                 "time": 14.0}
        m = benchlib.measure(before, after, 100000, 100)
        self.assertFalse(m["window"])
        self.assertEqual(m["requests"], 100000)
        self.assertAlmostEqual(m["cpu_us_per_req"], 20.0)
        self.assertAlmostEqual(m["cpu_util_pct"], 50.0)
        self.assertAlmostEqual(m["rss_mb"], 4.0)
        self.assertAlmostEqual(m["sleeps_per_req"], 0.0005)

    def test_a_window_counts_requests_on_the_port(self):
        before = {"pids": [1], "ticks": 0, "cpu_ns": 1_000_000_000, "hwm_kb": 1024,
                  "time": 1.0, "requests_in": 1000}
        after = {"pids": [1], "ticks": 0, "cpu_ns": 1_500_000_000, "hwm_kb": 1024,
                 "time": 2.0, "requests_in": 51000}
        m = benchlib.measure(before, after, 999999, 100)
        self.assertTrue(m["window"])
        self.assertEqual(m["requests"], 50000)
        self.assertAlmostEqual(m["cpu_us_per_req"], 10.0)


class Parsing(unittest.TestCase):
    def test_h2load_summary(self):
        h = suite.parse_h2load_summary(H2LOAD_OUTPUT)
        self.assertAlmostEqual(h["rps"], 55889.36)
        self.assertEqual(h["done"], 19998)
        self.assertEqual((h["failed"], h["errored"], h["timeout"]), (10, 2, 0))
        self.assertEqual(h["non2xx"], 8)

    def test_fast_path_misses_from_the_metrics(self):
        text = ("# HELP turnpike_soap_fast_path_misses SOAP messages ...\n"
                "# TYPE turnpike_soap_fast_path_misses counter\n"
                'turnpike_soap_fast_path_misses_total{reason="markup"} 0\n'
                'turnpike_soap_fast_path_misses_total{reason="not-compiled"} 12\n'
                'turnpike_requests_total{api="a"} 5\n')
        self.assertEqual(suite.parse_fast_path_misses(text), {"markup": 0, "not-compiled": 12})

    def test_h2load_summary_without_counts_is_an_error(self):
        with self.assertRaises(RuntimeError):
            suite.parse_h2load_summary("finished in 1s, 10 req/s\n")

    def test_h2load_request_log(self):
        # start (µs since the epoch), status, µs to the end of the response
        lines = ["1000\t200\t500", "1001\t200\t1500", "2000\t200\t1000", "2001\t404\t3000",
                 "2002\t200\t2000", "2003\t-1\t4000", "garbage", ""]
        all_ = benchlib.h2load_log_stats(lines)
        self.assertEqual(all_["logged"], 6)
        self.assertEqual(all_["errors"], 2)
        self.assertEqual(all_["ok"], 4)
        self.assertAlmostEqual(all_["p50_ms"], 1.5)
        self.assertAlmostEqual(all_["p99_ms"], 4.0)
        later = benchlib.h2load_log_stats(lines, since_us=2000)
        self.assertEqual(later["logged"], 4)
        self.assertAlmostEqual(later["p50_ms"], 2.0)
        self.assertAlmostEqual(later["p90_ms"], 4.0)

    def test_request_bodies_of_the_post_scenarios(self):
        for name in suite.BODIES:
            ctype, _, (how, src) = suite.BODIES[name]
            if how == "lua":
                text = suite.lua_body(src)
            else:
                with open(os.path.join(sc.CONFIGS, src)) as f:
                    text = f.read()
            if "json" in ctype:
                json.loads(text)
            else:
                xml.dom.minidom.parseString(text)

    def test_the_order_request_matches_the_wsdl_shape(self):
        with open(os.path.join(sc.CONFIGS, "order-request.json")) as f:
            order = json.load(f)["order"]
        self.assertIsInstance(order["line"], list)
        self.assertGreaterEqual(len(order["line"]), 2)
        self.assertNotIn("shippingAddress", order["customer"])     # an optional element left out
        text = ""
        for name in ("order-service.wsdl", "order-common.xsd"):
            with open(os.path.join(sc.CONFIGS, name)) as f:
                text += f.read()
        for needle in ('schemaLocation="order-common.xsd"', 'maxOccurs="unbounded"',
                       "xsd:enumeration", 'type="xsd:date"', "xsd:decimal", 'minOccurs="0"'):
            self.assertIn(needle, text)

    @unittest.skipUnless(shutil.which("xmllint"), "xmllint not installed")
    def test_the_order_messages_are_valid_against_the_schemas(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(sc.CONFIGS, "order-service.wsdl")) as f:
                schema = re.search(r"(<xsd:schema .*?</xsd:schema>)", f.read(), re.S).group(1)
            schema = schema.replace(
                "<xsd:schema ", '<xsd:schema xmlns:xsd="http://www.w3.org/2001/XMLSchema" '
                'xmlns:tns="https://turnpike.example/orders" '
                'xmlns:c="https://turnpike.example/common" ', 1).replace(
                'schemaLocation="order-common.xsd"',
                'schemaLocation="%s"' % os.path.join(sc.CONFIGS, "order-common.xsd"))
            with open(os.path.join(d, "orders.xsd"), "w") as f:
                f.write(schema)
            ns = ' xmlns:o="https://turnpike.example/orders" xmlns:c="https://turnpike.example/common"'
            with open(os.path.join(sc.CONFIGS, "order-request.xml")) as f:
                request = re.search(r"<soapenv:Body>(.*)</soapenv:Body>", f.read()).group(1)
            with open(os.path.join(sc.CONFIGS, "nginx-backend.conf")) as f:
                response = re.search(r"<soapenv:Body>(<o:submitOrderResponse.*?)</soapenv:Body>",
                                     f.read()).group(1)
            for name, body in (("request.xml", request.replace("<o:submitOrder>", "<o:submitOrder%s>" % ns, 1)),
                               ("response.xml", response)):
                with open(os.path.join(d, name), "w") as f:
                    f.write(body)
                p = subprocess.run(["xmllint", "--noout", "--schema", os.path.join(d, "orders.xsd"),
                                    os.path.join(d, name)], capture_output=True, text=True)
                self.assertEqual(p.returncode, 0, p.stderr)


class Plans(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.ctx = sc.Ctx(self.tmp, sc.backend_body())

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_membrane_has_the_seven_scenarios_and_their_baselines(self):
        runs, skips = suite.membrane_plan()
        cases = {r.case for r in runs}
        for c in ("short", "proxy", "auth", "tls", "openapi", "rest2soap", "soapvalidate",
                  "rest2soap-orders", "soapvalidate-orders"):
            self.assertIn(c, cases)
        for r in runs:
            if r.base:
                case, _, variant = r.base.partition("/")
                self.assertTrue(any(b.case == case and b.system == r.system
                                    and (not variant or b.variant == variant) for b in runs),
                                "no baseline %s for %s/%s" % (r.base, r.case, r.system))
            if r.config:
                self.assertTrue(os.path.isfile(os.path.join(sc.CONFIGS, r.config)), r.config)
        self.assertTrue(all(k.reason for k in skips))
        self.assertEqual({r.concurrency for r in runs if r.case == "short"}, {350})
        self.assertEqual({r.concurrency for r in runs if r.case != "short"}, {100})
        # each system is one run or a skip in the peer scenarios
        for c in ("short", "proxy", "auth", "tls"):
            named = {r.system for r in runs if r.case == c} | {k.system for k in skips if k.case == c}
            self.assertEqual(named, set(suite.SYSTEMS), c)

    def test_apisix_matrix(self):
        runs, skips = suite.apisix_plan(suite.SYSTEMS, self.ctx)
        variants = {r.variant for r in runs}
        self.assertEqual(len(variants), 16)
        self.assertEqual(len(runs) + len(skips), 16 * len(suite.SYSTEMS))
        self.assertEqual({k.system for k in skips}, {"caddy"})
        for r in runs:
            self.assertEqual(r.paths, ("/api%03d/" % (int(r.variant.split("-")[1]) - 1),))
            self.assertEqual(bool(r.headers), r.variant.endswith(("-key", "-both")))
            if not r.variant.endswith("-none"):
                self.assertEqual(r.base, r.variant.rsplit("-", 1)[0] + "-none")

    def test_wso2_sweeps_threads_over_the_cores(self):
        runs, _ = suite.wso2_plan(["turnpike", "nginx"])
        threads = sorted({r.threads for r in runs})
        self.assertEqual(threads, list(range(1, (os.cpu_count() or 2) + 1)))
        self.assertTrue(all(len(r.paths) == 8 and r.concurrency == 1000 for r in runs))
        self.assertEqual({r.cpus for r in runs if r.threads == 1}, {suite.SUT_CPU})

    def test_smoke_is_one_case_per_suite(self):
        runs, _ = suite.smoke_plan(self.ctx)
        self.assertEqual({r.suite for r in runs}, {"membrane", "apisix", "wso2"})
        self.assertEqual({r.system for r in runs}, {"turnpike", "nginx"})
        self.assertEqual(len(runs), 6)


class Configs(unittest.TestCase):
    """The generated configs have what the case says, and the systems accept them."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.ctx = sc.Ctx(cls.tmp, sc.backend_body())
        cls.files = {}
        for s in suite.SYSTEMS:
            for backend in ("mock", "real"):
                for routes in (1, 100):
                    for plugins in suite.APISIX_PLUGINS:
                        key = ("apisix", s, backend, routes, plugins)
                        try:
                            cls.files[key] = sc.apisix(s, routes, plugins, backend, cls.ctx)
                        except sc.NotExpressible as e:
                            cls.files[key] = e
            for threads in (1, 2):
                cls.files[("wso2", s, threads)] = sc.wso2(s, threads, cls.ctx)
        # Files the configs name by absolute path (the mocked body, the key map).
        for files in cls.files.values():
            if isinstance(files, dict):
                for name, text in list(files.items())[1:]:
                    with open(os.path.join(cls.tmp, name), "w") as f:
                        f.write(text)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def write(self, key):
        d = os.path.join(self.tmp, "-".join(str(k) for k in key))
        os.makedirs(d, exist_ok=True)
        files = self.files[key]
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        return d, os.path.join(d, next(iter(files)))

    def test_routes_consumers_and_plugins(self):
        t = self.files[("apisix", "turnpike", "real", 100, "both")]["turnpike.yaml"]
        self.assertEqual(t.count("\napi:\n"), 100)
        self.assertEqual(t.count("consumer: {"), 100)
        self.assertEqual(t.count("- apiKey:"), 100)
        self.assertEqual(t.count("- rateLimiter:"), 100)
        n = self.files[("apisix", "nginx", "mock", 100, "key")]["nginx.conf"]
        self.assertEqual(n.count("location /api"), 100)
        self.assertEqual(len(re.findall(r"key-\d{3} consumer-\d{3};", n)), 100)
        self.assertIn("try_files /mock-body.json", n)
        self.assertNotIn("limit_req ", n)
        h = self.files[("apisix", "haproxy", "real", 1, "both")]
        self.assertEqual(h["keys.map"].count("\n"), 100)
        self.assertIn("sc_http_req_rate(0) gt %d" % sc.LIMIT_COUNT, h["haproxy.cfg"])
        p = self.files[("apisix", "pingap", "mock", 100, "both")]["pingap.toml"]
        self.assertEqual(p.count("[locations.api"), 100)
        self.assertIn('plugins = ["keyAuth", "perIpLimit", "mockBody"]', p)
        self.assertIsInstance(self.files[("apisix", "caddy", "real", 1, "limit")], sc.NotExpressible)
        w = self.files[("wso2", "nginx", 2)]["nginx.conf"]
        self.assertIn("worker_processes 2;", w)
        self.assertEqual(w.count("location /svc/r"), 8)
        self.assertIn("threads: 2", self.files[("wso2", "turnpike", 2)]["turnpike.yaml"])

    def test_the_mocked_backends_answer_the_backends_body(self):
        body = sc.backend_body()
        self.assertTrue(body.startswith('{"status":"ok"') and len(body) > 1000)
        self.assertIn("body: '%s'" % body, self.files[("apisix", "turnpike", "mock", 1, "none")]["turnpike.yaml"])
        self.assertEqual(self.files[("apisix", "nginx", "mock", 1, "none")]["mock-body.json"], body)
        self.assertIn("respond `%s` 200" % body, self.files[("apisix", "caddy", "mock", 1, "key")]["Caddyfile"])

    def test_pingap_configs_are_toml_with_basic_settings_in_their_table(self):
        try:
            import tomllib
        except ImportError:
            self.skipTest("tomllib needs Python 3.11")
        for key, files in self.files.items():
            if key[1] == "pingap" and isinstance(files, dict):
                conf = tomllib.loads(files["pingap.toml"])
                self.assertEqual(conf["basic"]["threads"], key[2] if key[0] == "wso2" else 1)
                server = conf["servers"]["bench"]
                self.assertEqual(set(server["locations"]), set(conf["locations"]))
                for loc in conf["locations"].values():
                    for plugin in loc.get("plugins", []):
                        self.assertIn(plugin, conf["plugins"])
        for name in ("pingap-return.toml.in", "pingap-proxy.toml.in", "pingap-auth.toml.in"):
            with open(os.path.join(sc.CONFIGS, name)) as f:
                conf = tomllib.loads(sc.fill(f.read(), tmp="/tmp/x"))
            self.assertEqual(conf["basic"]["threads"], 1)

    def test_templates_are_filled(self):
        self.assertEqual(sc.fill("a @PKI@/x @TMP@", pki="/p", tmp="/t"), "a /p/x /t")
        with self.assertRaises(KeyError):
            sc.fill("@NOPE@")

    def check_all(self, system, argv_of):
        checked = 0
        for key, files in self.files.items():
            if key[1] != system or not isinstance(files, dict):
                continue
            d, first = self.write(key)
            p = subprocess.run(argv_of(d, first), capture_output=True, text=True,
                               env=dict(os.environ, HOME=d, XDG_DATA_HOME=d, XDG_CONFIG_HOME=d))
            self.assertEqual(p.returncode, 0, "%s: %s %s" % (key, p.stdout[-400:], p.stderr[-800:]))
            checked += 1
        self.assertGreater(checked, 0)

    @unittest.skipUnless(shutil.which("nginx"), "nginx not installed")
    def test_nginx_accepts_its_configs(self):
        self.check_all("nginx", lambda d, f: ["nginx", "-t", "-q", "-p", d + "/", "-c", f,
                                              "-e", d + "/error.log"])

    @unittest.skipUnless(shutil.which("haproxy"), "haproxy not installed")
    def test_haproxy_accepts_its_configs(self):
        self.check_all("haproxy", lambda d, f: ["haproxy", "-c", "-q", "-f", f])

    @unittest.skipUnless(shutil.which("caddy"), "caddy not installed")
    def test_caddy_accepts_its_configs(self):
        self.check_all("caddy", lambda d, f: ["caddy", "validate", "--adapter", "caddyfile",
                                              "--config", f])

    @unittest.skipUnless(turnpike_binary(), "no turnpike binary (TURNPIKE_BIN, target/*/turnpike)")
    def test_turnpike_accepts_its_configs(self):
        tp = turnpike_binary()
        self.check_all("turnpike", lambda d, f: [tp, "validate", "-c", f])
        for name in ("turnpike-rest2soap-orders.yaml", "turnpike-soap-validate-orders.yaml"):
            p = subprocess.run([tp, "validate", "-c", os.path.join(sc.CONFIGS, name)],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)

    @unittest.skipUnless(shutil.which("nginx") and shutil.which("haproxy"), "nginx or haproxy not installed")
    def test_the_membrane_peer_configs_are_accepted(self):
        d = tempfile.mkdtemp(dir=self.tmp)
        for name in ("nginx-auth.conf", "nginx-return.conf", "nginx-proxy.conf"):
            p = subprocess.run(["nginx", "-t", "-q", "-p", d + "/", "-c", os.path.join(sc.CONFIGS, name),
                                "-e", d + "/error.log"], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
        for name in ("haproxy-return.cfg", "haproxy-auth.cfg", "haproxy-proxy.cfg"):
            p = subprocess.run(["haproxy", "-c", "-q", "-f", os.path.join(sc.CONFIGS, name)],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)


class Report(unittest.TestCase):
    def rec(self, suite_, case, system, rnd, rps, cpu, variant="", base=None, **kw):
        r = {"suite": suite_, "case": case, "system": system, "variant": variant, "round": rnd,
             "label": None, "base": base, "concurrency": 100, "threads": 1, "rps": rps,
             "cpu_us_per_req": cpu, "cpu_util_pct": 90.0, "rss_mb": 20.0, "errors": 0,
             "requests": 100000, "upstream_conns": 100, "configs": ["bench/configs/x"],
             "p50_ms": 1.0, "p90_ms": 1.5, "p95_ms": 2.0, "p98_ms": 2.5, "p99_ms": 3.0}
        r.update(kw)
        return r

    def test_report_tables_and_ratios(self):
        runs = []
        for rnd, f in ((1, 1.0), (2, 1.1)):
            runs += [
                self.rec("membrane", "proxy", "turnpike", rnd, 80000 * f, 12.0),
                self.rec("membrane", "proxy", "nginx", rnd, 80000 * f, 12.0),
                self.rec("membrane", "auth", "turnpike", rnd, 76000 * f, 12.6, base="proxy"),
                self.rec("membrane", "auth", "nginx", rnd, 72000 * f, 13.2, base="proxy"),
                self.rec("membrane", "rest2soap", "turnpike", rnd, 60000 * f, 16.0, variant="plain"),
                self.rec("membrane", "rest2soap", "turnpike", rnd, 42000 * f, 22.0,
                         variant="policy", base="rest2soap/plain",
                         fast_path_misses={"value": 3, "markup": 1} if rnd == 1 else {"value": 2}),
                self.rec("apisix", "mock-1-none", "turnpike", rnd, 100000, 8.0, variant="mock-1-none"),
                self.rec("apisix", "mock-1-limit", "turnpike", rnd, 90000, 9.0,
                         variant="mock-1-limit", base="mock-1-none"),
                self.rec("wso2", "threads-1", "turnpike", rnd, 30000, 25.0, variant="1"),
                self.rec("wso2", "threads-2", "turnpike", rnd, 45000, 26.0, variant="2",
                         base="threads-1", errors=45, requests=90000),
            ]
        meta = {"suites": ["membrane", "apisix", "wso2"], "mode": "quick",
                "profiles": {s: suite.PROFILES["quick"][s] for s in suite.SUITES},
                "machine": {"cpus": 2, "cpu": "Test CPU", "kernel": "6", "commit": "abc",
                            "versions": {"turnpike": "t", "nginx": "1.22"}},
                "command": "bench/run.sh --suite all --quick", "elapsed_s": 75.0,
                "absent": {"pingap": "not installed"},
                "skips": [{"suite": "membrane", "case": "auth", "system": "caddy", "variant": "",
                           "reason": "no rate limiter"}],
                "failures": []}
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "meta.json"), "w") as f:
                json.dump(meta, f)
            with open(os.path.join(d, "runs.jsonl"), "w") as f:
                for r in runs:
                    f.write(json.dumps(r) + "\n")
            path = suite_report.write(d)
            with open(path) as f:
                text = f.read()
            charts = suite_report.Charts(d)
            if not charts.missing:
                for name in ("membrane-rps.png", "membrane-cpu.png", "membrane-latency.png",
                             "apisix-rps.png", "wso2-rps.png", "wso2-latency.png"):
                    self.assertTrue(os.path.getsize(os.path.join(d, name)) > 1000, name)
                    self.assertIn("](%s)" % name, text)
        self.assertIn("Ran for 1 min 15 s", text)
        self.assertIn("Pingap: not installed", text)
        # auth vs own proxying: 76,000 / 80,000 = 0.950 (both rounds scale alike)
        self.assertRegex(text, r"\| turnpike \| 79,800 \| 6\.7% \| 0\.950 \|")
        self.assertIn("| 3 auth+limit | 0.987 | 0.950 (1.05) | 0.900 (1.10) |", text)
        self.assertIn("| 6 REST→SOAP | 0.55 | 0.700 (1.38) |", text)
        self.assertIn("200,000 measured requests): markup 1, value 5.", text)
        self.assertIn("— Caddy: no rate limiter.", text)
        # apisix: limit-count 0.900 of no plugin
        self.assertRegex(text, r"\| 1 \| limit-count \| 90,000 \| 0\.900 \| 9\.0 \|")
        # wso2: 2 threads scale 1.50x; error rate 45 / 180,000 requests
        self.assertRegex(text, r"\| 2 \| turnpike \| 45,000 \| — \| 1\.50 \| 26\.0 \|")
        self.assertIn("| 0.050% |", text)     # 90 errors in 180,000 requests


if __name__ == "__main__":
    unittest.main()
