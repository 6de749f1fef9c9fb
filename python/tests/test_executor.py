"""End-to-end tests: run the executor as a subprocess and talk to it over its socket."""

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

from turnpike_policy.protocol import FrameDecoder, encode_message, loads

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

POLICY_MODULE = '''
import asyncio
from turnpike_policy import Policy, Response

print("tpol imported")  # must not reach the protocol channel


class AddTenant(Policy):
    def __init__(self, config):
        super().__init__(config)
        self.header = config["header"]

    def on_request(self, request):
        if request.headers.get("x-block") == "1":
            return Response(status=418, body=b"blocked", headers={"X-Reason": "blocked"})
        request.headers[self.header] = "t-" + request.path.rsplit("/", 1)[-1]

    def on_response(self, request, response):
        response.headers["x-seen"] = "1"


class Rewrite(Policy):
    def on_request(self, request):
        request.method = "POST"
        request.path = "/v2" + request.path
        request.query = request.query + "&added=1" if request.query else "added=1"


class Noop(Policy):
    def on_request(self, request):
        request.headers["x-a"] = request.headers["x-a"]  # same value: no change


class Body(Policy):
    def on_request(self, request):
        if request.body is None:
            request.body = "created"
        else:
            request.body = request.body.upper()

    def on_response(self, request, response):
        response.body = (response.body or b"") + b"!"


class Inspect(Policy):
    def on_request(self, request):
        h = request.headers
        c = request.consumer
        h["x-client"] = request.client_ip
        h["x-consumer"] = (c.name + ":" + ",".join(c.groups)) if c else "-"
        h["x-sub"] = request.jwt["sub"] if request.jwt else "-"
        h["x-id"] = request.path_params.get("id", "-")
        h["x-q"] = ",".join(request.query_params.get("a", []))
        h["x-body-none"] = str(request.body is None)
        h.add("x-multi", "1")
        h.add("X-Multi", "2")


class Slow(Policy):
    async def on_request(self, request):
        await asyncio.sleep(float(request.headers.get("x-delay", "0")))
        request.headers["x-async"] = request.headers.get("x-n", "")


class Raises(Policy):
    def on_request(self, request):
        raise ValueError("bad thing")


class AsyncRaises(Policy):
    async def on_response(self, request, response):
        await asyncio.sleep(0)
        raise KeyError("k")


class RespStatus(Policy):
    def on_response(self, request, response):
        response.status = 201
        response.headers["x-seen"] = "1"
        del response.headers["server"]


class RespReplace(Policy):
    async def on_response(self, request, response):
        return Response(503, "unavailable", {"Content-Type": "text/plain"})


class ReturnSame(Policy):
    def on_response(self, request, response):
        response.headers["x-same"] = "1"
        return response


class Printer(Policy):
    def on_request(self, request):
        print("hello from a policy")
        request.headers["x-printed"] = "1"


class Plain:
    """Not a Policy subclass: accepted because it has on_response."""

    def __init__(self, config):
        self.config = config

    def on_response(self, request, response):
        response.headers["x-plain"] = str(self.config.get("n"))


class BadReturn(Policy):
    def on_request(self, request):
        return 42


class BadInit(Policy):
    def __init__(self, config):
        raise RuntimeError("nope")
'''

POLICIES = [
    ("AddTenant", {"header": "x-tenant"}),
    ("Rewrite", {}),
    ("Noop", {}),
    ("Body", {}),
    ("Inspect", {}),
    ("Slow", {}),
    ("Raises", {}),
    ("AsyncRaises", {}),
    ("RespStatus", {}),
    ("RespReplace", {}),
    ("ReturnSame", {}),
    ("Printer", {}),
    ("Plain", {"n": 5}),
    ("BadReturn", {}),
]
PID = {name: i for i, (name, _) in enumerate(POLICIES)}


class Executor:
    """An executor subprocess plus its temp dir (policy module, policies file, socket)."""

    def __init__(self, policies, env_extra=None, module_source=POLICY_MODULE, stale_socket=False):
        self.dir = tempfile.mkdtemp(prefix="tp-test-")
        with open(os.path.join(self.dir, "tpol.py"), "w") as f:
            f.write(module_source)
        self.policies_file = os.path.join(self.dir, "policies.json")
        with open(self.policies_file, "w") as f:
            json.dump({"path": [self.dir], "policies": policies}, f)
        self.socket_path = os.path.join(self.dir, "exec.sock")
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        if stale_socket:  # as left behind by an executor that was killed
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(self.socket_path)
            s.close()
        env = dict(os.environ)
        env["PYTHONPATH"] = PYTHON_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update(env_extra or {})
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "turnpike_policy.executor",
                 "--socket", self.socket_path, "--policies", self.policies_file],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env, cwd=self.dir,
            )

    def first_line(self, timeout=30.0):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            raise AssertionError("executor printed nothing; stderr:\n" + self.stderr())
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError("executor closed stdout; stderr:\n" + self.stderr())
        return json.loads(line)

    def stderr(self):
        with open(self.stderr_path, "r", errors="replace") as f:
            return f.read()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for s in (self.proc.stdin, self.proc.stdout):
            try:
                s.close()
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


class Client:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(15)
        self.sock.connect(path)
        self.decoder = FrameDecoder()
        self.ready = []
        self.next_id = 1

    def send(self, msg, body=b"", fid=None):
        if fid is None:
            fid, self.next_id = self.next_id, self.next_id + 1
        self.sock.sendall(encode_message(fid, msg, body))
        return fid

    def recv(self):
        while not self.ready:
            data = self.sock.recv(1 << 16)
            if not data:
                raise EOFError("connection closed")
            self.ready.extend(self.decoder.feed(data))
        fid, jb, body = self.ready.pop(0)
        return fid, loads(jb), body

    def call(self, msg, body=b""):
        fid = self.send(msg, body)
        rid, reply, rbody = self.recv()
        assert rid == fid, (rid, fid)
        return reply, rbody

    def close(self):
        self.sock.close()


def request_msg(policy, **kw):
    m = {
        "policy": PID[policy] if isinstance(policy, str) else policy,
        "phase": "request",
        "method": "GET",
        "path": "/a/b",
        "query": "",
        "headers": [["host", "example.com"], ["x-a", "1"]],
        "client": "127.0.0.1",
        "consumer": None,
        "jwt": None,
        "pathParams": {},
        "body": False,
    }
    m.update(kw)
    return m


def response_msg(policy, status=200, headers=None, response_body=False, **kw):
    m = request_msg(policy, phase="response", **kw)
    m["response"] = {"status": status,
                     "headers": headers if headers is not None else [["server", "up"], ["content-type", "text/html"]]}
    m["responseBody"] = response_body
    return m


class ServingTest(unittest.TestCase):
    env_extra = {}

    @classmethod
    def setUpClass(cls):
        cls.ex = Executor([{"id": i, "module": "tpol", "class": name, "config": conf}
                           for i, (name, conf) in enumerate(POLICIES)], cls.env_extra)
        cls.ready = cls.ex.first_line()

    @classmethod
    def tearDownClass(cls):
        cls.ex.close()

    def setUp(self):
        self.c = Client(self.ex.socket_path)

    def tearDown(self):
        self.c.close()

    def test_ready_line(self):
        self.assertTrue(self.ready["ready"])
        self.assertEqual(self.ready["pid"], self.ex.proc.pid)
        flags = {p["id"]: (p["request"], p["response"]) for p in self.ready["policies"]}
        self.assertEqual(flags[PID["AddTenant"]], (True, True))
        self.assertEqual(flags[PID["Rewrite"]], (True, False))
        self.assertEqual(flags[PID["RespStatus"]], (False, True))
        self.assertEqual(flags[PID["Plain"]], (False, True))
        self.assertEqual(flags[PID["Slow"]], (True, False))

    def test_header_change(self):
        reply, body = self.c.call(request_msg("AddTenant", path="/users/42"))
        self.assertEqual(reply["action"], "continue")
        self.assertFalse(reply["body"])
        self.assertEqual(reply["request"], {"headers": [["host", "example.com"], ["x-a", "1"], ["x-tenant", "t-42"]]})
        self.assertNotIn("response", reply)
        self.assertEqual(body, b"")

    def test_no_change(self):
        reply, body = self.c.call(request_msg("Noop"))
        self.assertEqual(reply, {"action": "continue", "body": False})
        # a phase the policy does not implement is a no-op continue
        reply, _ = self.c.call(response_msg("Rewrite"))
        self.assertEqual(reply, {"action": "continue", "body": False})

    def test_path_query_method_change(self):
        reply, _ = self.c.call(request_msg("Rewrite", query="x=1"))
        self.assertEqual(reply["request"], {"method": "POST", "path": "/v2/a/b", "query": "x=1&added=1"})
        reply, _ = self.c.call(request_msg("Rewrite"))
        self.assertEqual(reply["request"]["query"], "added=1")

    def test_body_replacement(self):
        reply, body = self.c.call(request_msg("Body", body=True), b"hello")
        self.assertEqual(reply, {"action": "continue", "body": True})
        self.assertEqual(body, b"HELLO")
        # body not sent to the policy: request.body is None, setting one counts as a change
        reply, body = self.c.call(request_msg("Body"), b"")
        self.assertTrue(reply["body"])
        self.assertEqual(body, b"created")
        # unchanged body (already upper case) is not sent back
        reply, body = self.c.call(request_msg("Body", body=True), b"SAME")
        self.assertEqual(reply, {"action": "continue", "body": False})
        self.assertEqual(body, b"")

    def test_response_body(self):
        reply, body = self.c.call(response_msg("Body", response_body=True), b"<html>")
        self.assertEqual(reply, {"action": "continue", "body": True})
        self.assertEqual(body, b"<html>!")

    def test_request_attributes(self):
        reply, _ = self.c.call(request_msg(
            "Inspect", query="a=1&a=2&b=", client="10.0.0.9",
            consumer={"name": "alice", "groups": ["gold", "beta"]}, jwt={"sub": "u1", "n": 2**70},
            pathParams={"id": "3"}))
        h = reply["request"]["headers"]
        self.assertEqual(h[:2], [["host", "example.com"], ["x-a", "1"]])
        d = dict((n, v) for n, v in h)
        self.assertEqual(d["x-client"], "10.0.0.9")
        self.assertEqual(d["x-consumer"], "alice:gold,beta")
        self.assertEqual(d["x-sub"], "u1")
        self.assertEqual(d["x-id"], "3")
        self.assertEqual(d["x-q"], "1,2")
        self.assertEqual(d["x-body-none"], "True")
        self.assertEqual(h[-2:], [["x-multi", "1"], ["x-multi", "2"]])

    def test_early_response(self):
        reply, body = self.c.call(request_msg("AddTenant", headers=[["x-block", "1"]]))
        self.assertEqual(reply, {"action": "respond", "status": 418, "headers": [["x-reason", "blocked"]]})
        self.assertEqual(body, b"blocked")

    def test_async_policy(self):
        reply, _ = self.c.call(request_msg("Slow", headers=[["x-delay", "0.01"], ["x-n", "7"]]))
        self.assertEqual(reply["request"]["headers"][-1], ["x-async", "7"])

    def test_policy_raises(self):
        reply, body = self.c.call(request_msg("Raises"))
        self.assertEqual(reply["action"], "error")
        self.assertEqual(reply["message"], "ValueError: bad thing")
        self.assertIn("Traceback (most recent call last)", reply["traceback"])
        self.assertIn("tpol.py", reply["traceback"])
        self.assertIn('raise ValueError("bad thing")', reply["traceback"])
        self.assertNotIn("executor.py", reply["traceback"])  # starts at the policy's frame
        reply, _ = self.c.call(response_msg("AsyncRaises"))
        self.assertEqual(reply["action"], "error")
        self.assertEqual(reply["message"], "KeyError: 'k'")
        # still serving
        reply, _ = self.c.call(request_msg("Noop"))
        self.assertEqual(reply["action"], "continue")

    def test_bad_return_value(self):
        reply, _ = self.c.call(request_msg("BadReturn"))
        self.assertEqual(reply["action"], "error")
        self.assertIn("must return None or a Response", reply["message"])

    def test_response_phase_status_headers(self):
        reply, body = self.c.call(response_msg("RespStatus"))
        self.assertEqual(reply, {"action": "continue", "body": False, "response": {
            "status": 201, "headers": [["content-type", "text/html"], ["x-seen", "1"]]}})
        reply, _ = self.c.call(response_msg("AddTenant"))
        self.assertEqual(reply["response"], {"headers": [["server", "up"], ["content-type", "text/html"], ["x-seen", "1"]]})
        self.assertNotIn("request", reply)
        reply, _ = self.c.call(response_msg("Plain"))
        self.assertEqual(reply["response"]["headers"][-1], ["x-plain", "5"])
        # returning the response object itself means "changed in place"
        reply, _ = self.c.call(response_msg("ReturnSame"))
        self.assertEqual(reply["action"], "continue")
        self.assertEqual(reply["response"]["headers"][-1], ["x-same", "1"])

    def test_response_replaced(self):
        reply, body = self.c.call(response_msg("RespReplace", response_body=True), b"original")
        self.assertEqual(reply, {"action": "respond", "status": 503, "headers": [["content-type", "text/plain"]]})
        self.assertEqual(body, b"unavailable")

    def test_pipelined_out_of_order(self):
        n = 40
        frames = []
        expected = {}
        for i in range(n):
            fid = 1000 + i
            if i % 2:
                delay = (n - i) * 0.002  # later requests finish first
                frames.append(encode_message(fid, request_msg(
                    "Slow", headers=[["x-delay", str(delay)], ["x-n", str(i)]])))
                expected[fid] = ("async", str(i))
            else:
                frames.append(encode_message(fid, request_msg("AddTenant", path=f"/p/{i}")))
                expected[fid] = ("tenant", f"t-{i}")
        self.c.sock.sendall(b"".join(frames))
        order = []
        for _ in range(n):
            fid, reply, _ = self.c.recv()
            order.append(fid)
            kind, val = expected.pop(fid)
            last = reply["request"]["headers"][-1]
            self.assertEqual(last, ["x-async" if kind == "async" else "x-tenant", val])
        self.assertEqual(expected, {})
        self.assertNotEqual(order, sorted(order))  # async replies came back out of order

    def test_many_connections(self):
        clients = [Client(self.ex.socket_path) for _ in range(5)]
        try:
            for i, c in enumerate(clients):
                c.send(request_msg("AddTenant", path=f"/c/{i}"), fid=i)
            for i, c in enumerate(clients):
                fid, reply, _ = c.recv()
                self.assertEqual(fid, i)
                self.assertEqual(reply["request"]["headers"][-1], ["x-tenant", f"t-{i}"])
        finally:
            for c in clients:
                c.close()

    def test_unknown_policy_and_malformed(self):
        reply, _ = self.c.call(request_msg(999))
        self.assertEqual(reply["action"], "error")
        self.assertIn("unknown policy id 999", reply["message"])
        self.c.sock.sendall(b"".join([
            encode_message(5, {"policy": 0}),  # missing fields
            encode_message(6, request_msg("Noop", phase="sideways")),
        ]))
        from turnpike_policy.protocol import encode_frame
        self.c.sock.sendall(encode_frame(7, b"{not json"))
        got = {}
        for _ in range(3):
            fid, reply, _ = self.c.recv()
            got[fid] = reply
        self.assertEqual({r["action"] for r in got.values()}, {"error"})
        self.assertIn("missing field", got[5]["message"])
        self.assertIn("phase", got[6]["message"])
        self.assertIn("malformed", got[7]["message"])

    def test_bad_frame_closes_connection(self):
        self.c.sock.sendall(b"\x00\x00\x00\x05hello")
        with self.assertRaises((EOFError, ConnectionResetError)):
            self.c.recv()
        c2 = Client(self.ex.socket_path)
        try:
            reply, _ = c2.call(request_msg("Noop"))
            self.assertEqual(reply["action"], "continue")
        finally:
            c2.close()

    def test_large_body(self):
        payload = b"abc" * 500_000
        reply, body = self.c.call(request_msg("Body", body=True), payload)
        self.assertTrue(reply["body"])
        self.assertEqual(body, payload.upper())

    def test_print_goes_to_stderr(self):
        reply, _ = self.c.call(request_msg("Printer"))
        self.assertEqual(reply["request"]["headers"][-1], ["x-printed", "1"])
        # nothing but the ready line may ever appear on stdout
        r, _, _ = select.select([self.ex.proc.stdout], [], [], 0.05)
        self.assertEqual(r, [])
        deadline = time.time() + 5
        while "hello from a policy" not in self.ex.stderr() and time.time() < deadline:
            time.sleep(0.02)
        self.assertIn("hello from a policy", self.ex.stderr())
        self.assertIn("tpol imported", self.ex.stderr())


class ServingPureTest(ServingTest):
    """Same, with the stdlib json / asyncio fallbacks forced."""

    env_extra = {"TURNPIKE_POLICY_PURE": "1"}


class LifecycleTest(unittest.TestCase):
    def start(self, policies):
        ex = Executor(policies)
        self.addCleanup(ex.close)
        return ex

    def assert_load_error(self, policies, message_part, bad_id=0):
        ex = self.start(policies)
        line = ex.first_line()
        self.assertEqual(ex.proc.wait(timeout=15), 2)
        err = line["error"]
        self.assertEqual(err["id"], bad_id)
        self.assertIn(message_part, err["message"])
        self.assertIn("Traceback", err["traceback"])
        self.assertEqual(ex.proc.stdout.read(), b"")  # exactly one line
        self.assertFalse(os.path.exists(ex.socket_path))
        return err

    def test_missing_module(self):
        err = self.assert_load_error(
            [{"id": 0, "module": "tpol", "class": "Noop", "config": {}},
             {"id": 3, "module": "no_such_mod", "class": "X", "config": {}}],
            "ModuleNotFoundError: No module named 'no_such_mod'", bad_id=3)
        self.assertEqual((err["module"], err["class"]), ("no_such_mod", "X"))

    def test_missing_class(self):
        err = self.assert_load_error([{"id": 0, "module": "tpol", "class": "Missing"}],
                                     "AttributeError: module 'tpol' has no attribute 'Missing'")
        self.assertEqual(err["class"], "Missing")

    def test_raising_constructor(self):
        err = self.assert_load_error([{"id": 0, "module": "tpol", "class": "BadInit", "config": {}}],
                                     "RuntimeError: nope")
        self.assertIn("tpol.py", err["traceback"])

    def test_syntax_error_in_module(self):
        ex = Executor([{"id": 0, "module": "tpol", "class": "X"}], module_source="def broken(:\n")
        self.addCleanup(ex.close)
        line = ex.first_line()
        self.assertEqual(ex.proc.wait(timeout=15), 2)
        self.assertTrue(line["error"]["message"].startswith("SyntaxError"))

    def test_stdin_eof_stops(self):
        ex = self.start([{"id": 0, "module": "tpol", "class": "Noop"}])
        line = ex.first_line()
        self.assertTrue(line["ready"])
        self.assertTrue(os.path.exists(ex.socket_path))
        c = Client(ex.socket_path)
        self.assertEqual(c.call(request_msg(0))[0]["action"], "continue")
        ex.proc.stdin.close()
        self.assertEqual(ex.proc.wait(timeout=15), 0)
        self.assertFalse(os.path.exists(ex.socket_path))
        self.assertEqual(ex.proc.stdout.read(), b"")
        c.close()

    def test_sigterm_stops_and_stale_socket_replaced(self):
        ex = Executor([{"id": 0, "module": "tpol", "class": "Slow"}], stale_socket=True)
        self.addCleanup(ex.close)
        self.assertTrue(ex.first_line()["ready"])
        c = Client(ex.socket_path)
        self.addCleanup(c.close)
        reply, _ = c.call(request_msg(0, headers=[["x-n", "1"]]))
        self.assertEqual(reply["request"]["headers"][-1], ["x-async", "1"])
        # an in-flight async request does not hold up shutdown
        c.send(request_msg(0, headers=[["x-delay", "30"]]))
        time.sleep(0.1)
        ex.proc.send_signal(signal.SIGTERM)
        self.assertEqual(ex.proc.wait(timeout=15), 0)
        self.assertFalse(os.path.exists(ex.socket_path))
        with self.assertRaises((EOFError, ConnectionResetError)):
            c.recv()

if __name__ == "__main__":
    unittest.main()
