"""Framing round-trips."""

import struct
import unittest

from turnpike_policy.protocol import FrameDecoder, ProtocolError, encode_frame, encode_message, loads


class ProtocolTest(unittest.TestCase):
    def test_layout(self):
        f = encode_frame(7, b'{"a":1}', b"body")
        L, fid, J = struct.unpack(">IQI", f[:16])
        self.assertEqual((L, fid, J), (len(f) - 4, 7, 7))
        self.assertEqual(f[16:23], b'{"a":1}')
        self.assertEqual(f[23:], b"body")

    def test_roundtrip_split_at_every_byte(self):
        frames = [encode_message(i, {"i": i, "s": "é"}, b"x" * i) for i in range(5)]
        stream = b"".join(frames)
        for step in (1, 2, 3, 7, 16, 100, len(stream)):
            dec = FrameDecoder()
            got = []
            for i in range(0, len(stream), step):
                got.extend(dec.feed(stream[i:i + step]))
            self.assertEqual([(fid, loads(j), b) for fid, j, b in got],
                             [(i, {"i": i, "s": "é"}, b"x" * i) for i in range(5)])
            self.assertEqual(dec.buffered, 0)

    def test_large_body_in_chunks(self):
        body = bytes(range(256)) * 4096
        f = encode_frame(2**63, b"{}", body)
        dec = FrameDecoder()
        out = []
        for i in range(0, len(f), 65536):
            out.extend(dec.feed(f[i:i + 65536]))
        self.assertEqual(len(out), 1)
        self.assertEqual(out[0][0], 2**63)
        self.assertEqual(out[0][2], body)

    def test_bad_lengths(self):
        with self.assertRaises(ProtocolError):
            FrameDecoder().feed(struct.pack(">I", 5) + b"\0" * 5)
        with self.assertRaises(ProtocolError):
            FrameDecoder().feed(struct.pack(">IQI", 12, 1, 1))


if __name__ == "__main__":
    unittest.main()
