#!/usr/bin/env python3
"""Generate the turnpike config for benchmark case 3 (many APIs).

Reads the 1-API config (default bench/configs/turnpike-1api.yaml) and inserts
COUNT extra `api:` documents right before its first `api:` document, so the
benchmarked API (path /bench/) stays byte-for-byte the same and comes last:
a router that scans APIs in order has to pass all COUNT of them.

Each extra API listens on the same port as the benchmarked one, has the
distinct path prefix /svcNNNNN/ (/svc00001/ ... /svc10000/) and the same
target. Documents are written in YAML flow style, one line each.

Usage: gen_many_apis.py [--count 10000] [--base FILE] [--out FILE]
Standard library only.
"""
import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BASE = os.path.join(HERE, "configs", "turnpike-1api.yaml")


def split_documents(text):
    """Split a multi-document YAML text on lines that are exactly '---'."""
    docs, cur = [], []
    for line in text.splitlines(keepends=True):
        if re.match(r"^---\s*$", line):
            docs.append("".join(cur))
            cur = []
        else:
            cur.append(line)
    docs.append("".join(cur))
    return docs


def first_key(doc):
    """Top-level key of a document (first non-comment, non-blank line)."""
    for line in doc.splitlines():
        s = line.strip()
        if s and not s.startswith("#"):
            m = re.match(r"^([A-Za-z_][\w-]*)\s*:", line)
            return m.group(1) if m else None
    return None


def scalar(doc, key):
    m = re.search(r"^\s*%s:\s*([^\s#]+)" % re.escape(key), doc, re.M)
    return m.group(1) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--base", default=DEFAULT_BASE,
                    help="1-API config to extend (default: %(default)s)")
    ap.add_argument("--out", default="-", help="output file (default: stdout)")
    args = ap.parse_args()
    if not 1 <= args.count <= 99999:
        ap.error("--count must be between 1 and 99999")

    with open(args.base, encoding="utf-8") as f:
        docs = split_documents(f.read())
    api_idx = [i for i, d in enumerate(docs) if first_key(d) == "api"]
    if not api_idx:
        sys.exit("gen_many_apis.py: no 'api:' document in %s" % args.base)
    bench = docs[api_idx[0]]
    # The benchmarked API's port and target (block style in the base file:
    # `port:` appears first under api:, then host/port under target:).
    ports = re.findall(r"^\s*port:\s*(\d+)", bench, re.M)
    host = scalar(bench, "host")
    if len(ports) < 2 or host is None:
        sys.exit("gen_many_apis.py: cannot read api port / target host+port from %s"
                 % args.base)
    api_port, target_port = ports[0], ports[1]

    extra = [
        "api: { port: %s, path: { uri: /svc%05d/ }, target: { host: %s, port: %s } }\n"
        % (api_port, n, host, target_port)
        for n in range(1, args.count + 1)
    ]

    out_docs = []
    for i, d in enumerate(docs):
        if i == api_idx[0]:
            out_docs.extend(extra)
        out_docs.append(d)
    # Re-join: documents from the base keep their own trailing newline.
    text = "---\n".join(d if d.endswith("\n") or d == "" else d + "\n" for d in out_docs)

    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main()
