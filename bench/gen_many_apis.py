#!/usr/bin/env python3
"""Generate the turnpike config for benchmark case 3 (many APIs).

Reads the 1-API config (default bench/configs/turnpike-1api.yaml) and inserts
COUNT extra `api:` documents right before its first `api:` document, so the
benchmarked API (path /bench/) stays byte-for-byte the same and comes last:
a router that scans APIs in order has to pass all COUNT of them.

Each extra API listens on the same port (and ip) as the benchmarked one, has the
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


def api_fields(doc):
    """Read port, ip, target host and target port of a block-style api doc.

    Only the simple shape used in bench/configs is supported:
    `api:` then 2-space-indented keys, `target:` with 4-space-indented keys.
    """
    fields, section = {}, None
    for line in doc.splitlines():
        line = line.split(" #", 1)[0].rstrip()
        m = re.match(r"^( *)([A-Za-z]\w*):\s*(.*)$", line)
        if not m:
            continue
        indent, key, val = len(m.group(1)), m.group(2), m.group(3)
        if indent == 2:
            section = key
            if val:
                fields[key] = val
        elif indent == 4 and section == "target" and val:
            fields["target." + key] = val
    return fields


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
    # Same listener (port, ip) and same target as the benchmarked API.
    f = api_fields(bench)
    if not all(k in f for k in ("port", "target.host", "target.port")):
        sys.exit("gen_many_apis.py: cannot read port and target host/port of the api in %s"
                 % args.base)
    listen = "port: %s" % f["port"] + (", ip: %s" % f["ip"] if "ip" in f else "")
    extra = [
        "api: { %s, path: { uri: /svc%05d/ }, target: { host: %s, port: %s } }\n"
        % (listen, n, f["target.host"], f["target.port"])
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
