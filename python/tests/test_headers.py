"""Unit tests for Headers, Request, Response and Policy."""

import unittest

from turnpike_policy import Consumer, Headers, Policy, Request, Response


class HeadersTest(unittest.TestCase):
    def make(self):
        return Headers([("Host", "example.com"), ("Set-Cookie", "a=1"), ("X-A", "x"), ("set-cookie", "b=2")])

    def test_case_insensitive_lookup(self):
        h = self.make()
        self.assertEqual(h["host"], "example.com")
        self.assertEqual(h["HOST"], "example.com")
        self.assertEqual(h.get("x-a"), "x")
        self.assertIsNone(h.get("missing"))
        self.assertEqual(h.get("missing", "d"), "d")
        with self.assertRaises(KeyError):
            h["missing"]
        self.assertIn("SET-COOKIE", h)
        self.assertNotIn("nope", h)
        self.assertNotIn(1, h)

    def test_repeats(self):
        h = self.make()
        self.assertEqual(h["set-cookie"], "a=1")
        self.assertEqual(h.get_all("Set-Cookie"), ["a=1", "b=2"])
        self.assertEqual(h.get_all("nope"), [])
        self.assertEqual(
            list(h.items()),
            [("host", "example.com"), ("set-cookie", "a=1"), ("x-a", "x"), ("set-cookie", "b=2")],
        )
        self.assertEqual(len(h.items()), 4)
        self.assertEqual(list(h.values()), ["example.com", "a=1", "x", "b=2"])
        self.assertIn(("SET-COOKIE", "b=2"), h.items())

    def test_iteration_and_len_over_distinct_names(self):
        h = self.make()
        self.assertEqual(list(h), ["host", "set-cookie", "x-a"])
        self.assertEqual(list(h.keys()), ["host", "set-cookie", "x-a"])
        self.assertEqual(len(h), 3)

    def test_set_replaces_all_in_place_of_first(self):
        h = self.make()
        h["SET-COOKIE"] = "c=3"
        self.assertEqual(h.to_list(), [("host", "example.com"), ("set-cookie", "c=3"), ("x-a", "x")])
        h["X-New"] = "n"
        self.assertEqual(h.to_list()[-1], ("x-new", "n"))

    def test_add(self):
        h = Headers()
        h.add("Via", "1")
        h.add("via", "2")
        h.add("X", "3")
        self.assertEqual(h.to_list(), [("via", "1"), ("via", "2"), ("x", "3")])

    def test_delete(self):
        h = self.make()
        del h["Set-Cookie"]
        self.assertEqual(h.to_list(), [("host", "example.com"), ("x-a", "x")])
        with self.assertRaises(KeyError):
            del h["set-cookie"]
        self.assertEqual(h.pop("host"), "example.com")
        self.assertEqual(h.pop("host", None), None)
        h.clear()
        self.assertEqual(len(h), 0)

    def test_type_checks(self):
        h = Headers()
        with self.assertRaises(TypeError):
            h["x"] = 1  # type: ignore[assignment]
        with self.assertRaises(TypeError):
            h.add("x", b"1")  # type: ignore[arg-type]
        with self.assertRaises(TypeError):
            Headers({"x": 1})  # type: ignore[dict-item]

    def test_constructors_and_equality(self):
        a = Headers({"A": "1", "b": "2"})
        self.assertEqual(a.to_list(), [("a", "1"), ("b", "2")])
        b = Headers(a)
        b.add("a", "3")
        self.assertEqual(a.get_all("a"), ["1"])  # copy is independent
        self.assertNotEqual(a, b)
        self.assertEqual(a, Headers([("b", "2"), ("a", "1")]))
        self.assertEqual(a, {"A": "1", "B": "2"})
        self.assertEqual(a.copy(), a)
        a.extend([("c", "4"), ("c", "5")])
        self.assertEqual(a.get_all("c"), ["4", "5"])
        self.assertIn("Headers(", repr(a))

    def test_wrap_copy_on_write(self):
        wire = [["host", "x"], ["x-a", "1"]]
        h = Headers._wrap(wire)
        self.assertIs(h._pairs, wire)
        h["x-a"] = "1"
        self.assertIsNot(h._pairs, wire)
        self.assertEqual(wire, [["host", "x"], ["x-a", "1"]])
        self.assertEqual(h._pairs, wire)  # same content: no change detected
        h.add("x-b", "2")
        self.assertEqual(wire, [["host", "x"], ["x-a", "1"]])
        h2 = Headers._wrap(wire)
        del h2["host"]
        self.assertEqual(wire, [["host", "x"], ["x-a", "1"]])


class ModelTest(unittest.TestCase):
    def test_request(self):
        r = Request("POST", "/x", "a=1&a=2&b=&c", {"Content-Type": "text/plain"}, b"hi",
                    consumer=Consumer("alice", ["gold"]), path_params={"id": "3"})
        self.assertEqual(r.query_params, {"a": ["1", "2"], "b": [""], "c": [""]})
        r.query = "z=9"
        self.assertEqual(r.query_params, {"z": ["9"]})
        self.assertEqual(r.headers["content-type"], "text/plain")
        self.assertEqual(r.consumer.groups, ["gold"])
        self.assertEqual(Request().query_params, {})
        self.assertIsNone(Request().body)

    def test_response(self):
        r = Response(404, "nö", {"X-A": "1"})
        self.assertEqual(r.body, "nö".encode())
        self.assertEqual(r.headers["x-a"], "1")
        self.assertEqual(Response().status, 200)
        self.assertEqual(Response().body, b"")
        self.assertEqual(Response(body=bytearray(b"x")).body, b"x")
        h = Headers({"a": "1"})
        r2 = Response(headers=h)
        r2.headers["a"] = "2"
        self.assertEqual(h["a"], "1")

    def test_policy_defaults(self):
        p = Policy({"a": 1})
        self.assertEqual(p.config, {"a": 1})
        self.assertEqual(Policy().config, {})
        self.assertIsNone(p.on_request(Request()))
        self.assertIsNone(p.on_response(Request(), Response()))


if __name__ == "__main__":
    unittest.main()
