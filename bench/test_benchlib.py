"""Tests of bench/benchlib.py's measuring arithmetic (run by cargo test, see
crates/turnpike/tests/bench_harness.rs):
python3 -m unittest discover -s bench -p 'test_*.py'"""
import io
import json
import os
import socket
import tempfile
import threading
import time
import unittest
from contextlib import redirect_stdout
from types import SimpleNamespace

import benchlib

WRK_OUTPUT = """Running 7s test @ http://127.0.0.1:2051/
  1 threads and 50 connections
  Latency Distribution
     50%    0.92ms
     75%    9.36ms
     90%   16.10ms
     99%   25.86ms
  101935 requests in 7.00s, 112.38MB read
Requests/sec:  14556.86
"""

# Two connections as `ss -tinH` prints them (abridged), and a listening-looking line without
# the field.
SS_OUTPUT = """0      0      127.0.0.1:2051 127.0.0.1:40312
\t cubic wscale:7,7 rto:201 bytes_received:118 segs_out:9 segs_in:12 data_segs_out:7 data_segs_in:1205 send 2.1Gbps
0      0      127.0.0.1:2051 127.0.0.1:40326
\t cubic wscale:7,7 rto:201 segs_out:4 segs_in:6 data_segs_out:3 data_segs_in:95 lastsnd:4
0      0      127.0.0.1:2051 127.0.0.1:40330
\t cubic wscale:7,7 rto:201 segs_in:1
"""


class Record(unittest.TestCase):
    def record(self, before, after):
        with tempfile.TemporaryDirectory() as d:
            paths = {}
            for name, body in (("wrk", WRK_OUTPUT), ("before", json.dumps(before)),
                               ("after", json.dumps(after))):
                paths[name] = os.path.join(d, name)
                with open(paths[name], "w") as f:
                    f.write(body)
            args = SimpleNamespace(round=1, case="c", system="s", url="", duration=7.0,
                                   wrk=paths["wrk"], before=paths["before"],
                                   after=paths["after"], clk_tck=100, accepts_before=None,
                                   accepts_after=None, summary=False)
            out = io.StringIO()
            with redirect_stdout(out):
                benchlib.cmd_record(args)
            return json.loads(out.getvalue())

    def test_a_window_counts_its_own_requests_and_nanoseconds(self):
        before = {"pids": [1], "ticks": 44, "cpu_ns": 453_000_000, "hwm_kb": 1024, "sleeps": 80,
                  "time": 100.0, "requests_in": 18_000}
        after = {"pids": [1], "ticks": 144, "cpu_ns": 1_453_000_000, "hwm_kb": 1024,
                 "sleeps": 180, "time": 105.0, "requests_in": 98_000}
        r = self.record(before, after)
        self.assertEqual(r["requests"], 80_000)
        self.assertAlmostEqual(r["cpu_us_per_req"], 12.5)
        self.assertAlmostEqual(r["rps"], 16_000)
        self.assertAlmostEqual(r["sleeps_per_req"], 100 / 80_000)
        self.assertAlmostEqual(r["cpu_util_pct"], 20.0)
        self.assertEqual(r["wrk_requests"], 101_935)

    def test_snapshots_without_counts_cover_the_whole_wrk_run(self):
        before = {"pids": [1], "ticks": 0, "hwm_kb": 1024, "sleeps": 0, "time": 100.0}
        after = {"pids": [1], "ticks": 140, "hwm_kb": 1024, "sleeps": 0, "time": 107.0}
        r = self.record(before, after)
        self.assertEqual(r["requests"], 101_935)
        self.assertAlmostEqual(r["cpu_us_per_req"], 1.4e6 / 101_935)
        self.assertAlmostEqual(r["rps"], 14556.86)
        self.assertNotIn("wrk_requests", r)


class Counting(unittest.TestCase):
    def test_ss_output_sums_every_connections_data_segments(self):
        self.assertEqual(benchlib.sum_data_segs_in(SS_OUTPUT), 1300)
        self.assertEqual(benchlib.sum_data_segs_in(""), 0)

    def test_requests_on_a_real_port_are_counted_one_per_segment(self):
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]
        accepted = []

        def serve():
            conn, _ = server.accept()
            accepted.append(conn)
            while True:
                data = conn.recv(4096)
                if not data:
                    return
                conn.sendall(b"ok")

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        client = socket.create_connection(("127.0.0.1", port))
        try:
            client.sendall(b"first")
            client.recv(16)
            start = benchlib.requests_in(port)
            for _ in range(25):
                client.sendall(b"GET / HTTP/1.1\r\n\r\n")
                client.recv(16)
            self.assertEqual(benchlib.requests_in(port) - start, 25)
        finally:
            client.close()
            t.join(5)
            for c in accepted:
                c.close()
            server.close()

    def test_sleeps_of_this_process_grow_as_it_blocks(self):
        before = benchlib._voluntary_switches(os.getpid())
        for _ in range(3):
            time.sleep(0.002)
        self.assertGreaterEqual(benchlib._voluntary_switches(os.getpid()), before + 3)

    def test_cpu_ns_of_this_process_grows_as_it_works(self):
        before = benchlib._cpu_ns(os.getpid())
        sum(i * i for i in range(200_000))
        self.assertGreater(benchlib._cpu_ns(os.getpid()), before)


if __name__ == "__main__":
    unittest.main()
