#!/usr/bin/env python3
"""Generate the turnpike configs of the policy cases (issue 4).

Case `auth` (Membrane's scenario 3): basic authentication + rate limiter with a limit
high enough that nothing is rejected, against plain proxying on the same port layout.

Case `matrix` (API7/APISIX's matrix): no policy / apiKey / rateLimiter / both, over 1 and
100 APIs, with 100 consumers (the apiKey store is the consumers').

Usage: gen_policy_configs.py OUT_DIR
Writes OUT_DIR/<name>.yaml for every config and prints nothing. Standard library only.
"""
import os
import sys

HEAD = "gateway:\n  threads: 1\n  accessLog: false\n"
BACKEND = "  target:\n    host: 127.0.0.1\n    port: 2010\n"
CONSUMERS = "".join(
    "---\nconsumer: { name: consumer-%03d, credentials: { apiKey: key-%03d } }\n" % (i, i)
    for i in range(100))
API_KEY = "    - apiKey:\n        stores: [ { consumers: {} } ]\n"
LIMIT = ("    - rateLimiter:\n        requestLimit: 100000000\n"
         "        requestLimitDuration: PT1H\n")


def scenario3(port):
    # Exactly the YAML (Membrane scenario 3), plus the loopback address.
    return HEAD + (
        "---\napi:\n  port: %d\n  ip: 127.0.0.1\n  flow:\n"
        "    - basicAuthentication:\n        users:\n"
        "          - username: loadtest\n            password: \"secret\"\n"
        "    - rateLimiter:\n        requestLimit: 100000000\n"
        "        requestLimitDuration: PT1H\n" % port) + BACKEND


def plain(port):
    return HEAD + "---\napi:\n  port: %d\n  ip: 127.0.0.1\n" % port + BACKEND


def matrix(port, policies, apis):
    flow = {"plain": "", "key": API_KEY, "limit": LIMIT, "both": API_KEY + LIMIT}[policies]
    out = [HEAD, CONSUMERS]
    for i in range(apis):
        out.append("---\napi:\n  port: %d\n  ip: 127.0.0.1\n  path: { uri: /api%03d/ }\n" % (port, i))
        if flow:
            out.append("  flow:\n" + flow)
        out.append(BACKEND)
    return "".join(out)


def main():
    if sys.argv[1:] in (["-h"], ["--help"]):
        sys.stdout.write(__doc__)
        return
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.stderr.write(__doc__)
        sys.exit(2)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    files = {
        "auth-plain": plain(2040),
        "auth-s3": scenario3(2041),
    }
    port = 2042
    for apis in (1, 100):
        for policies in ("plain", "key", "limit", "both"):
            files["matrix-%s-%d" % (policies, apis)] = matrix(port, policies, apis)
            port += 1
    for name, text in files.items():
        with open(os.path.join(out, name + ".yaml"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
