"""Framing and JSON helpers for the gateway <-> executor protocol.

Every frame, in both directions, is::

    [u32 BE L][u64 BE id][u32 BE J][J bytes of UTF-8 JSON][L - 12 - J bytes of body]

``L`` counts every byte after the length field itself.  A reply carries the
id of the request frame it answers.

The module is shared by the executor and by the tests.  ``orjson`` is used for
JSON when it can be imported (unless ``TURNPIKE_POLICY_PURE=1`` is set in the
environment); otherwise the standard library ``json`` module is used.
"""

from __future__ import annotations

import importlib
import json
import os
import struct
from typing import Any, Callable, List, Tuple

__all__ = [
    "ProtocolError",
    "FrameDecoder",
    "Frame",
    "encode_frame",
    "encode_message",
    "dumps",
    "loads",
    "LENGTH",
    "ID_JSONLEN",
    "HEADER",
    "MIN_FRAME",
]

#: ``[u32 L]``
LENGTH = struct.Struct(">I")
#: ``[u64 id][u32 J]`` (the part of the header that ``L`` covers)
ID_JSONLEN = struct.Struct(">QI")
#: the whole 16-byte frame header ``[u32 L][u64 id][u32 J]``
HEADER = struct.Struct(">IQI")
#: smallest legal value of ``L`` (id + json length, empty JSON and body)
MIN_FRAME = 12
#: largest frame id / JSON length the header can carry
_MAX_U32 = 0xFFFFFFFF

#: ``(frame id, JSON bytes, body bytes)``
Frame = Tuple[int, bytes, bytes]


class ProtocolError(Exception):
    """Raised by :class:`FrameDecoder` when the byte stream cannot be framed."""


# --------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------

_std_encoder = json.JSONEncoder(separators=(",", ":"))
_std_encode = _std_encoder.encode
_std_loads = json.loads


def _std_dumps(obj: Any) -> bytes:
    return _std_encode(obj).encode("utf-8")


dumps: Callable[[Any], bytes]
loads: Callable[[Any], Any]

_orjson: Any = None
if os.environ.get("TURNPIKE_POLICY_PURE", "") in ("", "0"):
    try:  # pragma: no cover - depends on the environment
        _orjson = importlib.import_module("orjson")
    except ImportError:  # pragma: no cover
        _orjson = None

if _orjson is not None:  # pragma: no cover - depends on the environment
    _or_dumps: Callable[[Any], bytes] = _orjson.dumps
    _or_loads: Callable[[Any], Any] = _orjson.loads

    def dumps(obj: Any) -> bytes:
        """Serialise ``obj`` to compact UTF-8 JSON bytes."""
        try:
            return _or_dumps(obj)
        except TypeError:
            # orjson refuses a few things json accepts (e.g. ints > 64 bits)
            return _std_dumps(obj)

    def loads(data: Any) -> Any:
        """Parse JSON from ``bytes``/``str``."""
        try:
            return _or_loads(data)
        except _orjson.JSONDecodeError:
            # e.g. integers beyond 64 bits; json gives the definitive answer
            return _std_loads(data)

    JSON_BACKEND = "orjson"
else:
    dumps = _std_dumps
    loads = _std_loads
    JSON_BACKEND = "json"


# --------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------

_pack_header = HEADER.pack


def encode_frame(frame_id: int, json_bytes: bytes, body: bytes = b"") -> bytes:
    """Build one frame from already-serialised JSON and a body."""
    jl = len(json_bytes)
    if body:
        return b"".join((_pack_header(12 + jl + len(body), frame_id, jl), json_bytes, body))
    return _pack_header(12 + jl, frame_id, jl) + json_bytes


def encode_message(frame_id: int, message: Any, body: bytes = b"") -> bytes:
    """Serialise ``message`` as JSON and build one frame."""
    return encode_frame(frame_id, dumps(message), body)


class FrameDecoder:
    """Incremental decoder: feed it bytes as they arrive, get whole frames back.

    Partial frames are kept as a list of chunks and joined only once enough
    bytes have arrived, so a large body split over many reads is copied a
    bounded number of times rather than once per read.
    """

    __slots__ = ("_chunks", "_have", "_need")

    def __init__(self) -> None:
        self._chunks: List[bytes] = []
        self._have = 0
        self._need = 0

    @property
    def buffered(self) -> int:
        """Number of bytes held for an incomplete frame."""
        return self._have

    def feed(self, data: bytes) -> List[Frame]:
        """Consume ``data``; return every frame it completes (possibly none).

        Raises :class:`ProtocolError` on an impossible length; the decoder is
        then unusable and the connection should be closed.
        """
        if self._chunks:
            self._chunks.append(data)
            self._have += len(data)
            if self._have < self._need:
                return []
            data = b"".join(self._chunks)
            self._chunks = []
            self._have = 0
        frames: List[Frame] = []
        n = len(data)
        pos = 0
        unpack_len = LENGTH.unpack_from
        unpack_idj = ID_JSONLEN.unpack_from
        while True:
            avail = n - pos
            if avail < 4:
                need = 4
                break
            (length,) = unpack_len(data, pos)
            if length < MIN_FRAME:
                raise ProtocolError(f"frame length {length} is shorter than the frame header")
            end = pos + 4 + length
            if end > n:
                need = 4 + length
                break
            frame_id, jlen = unpack_idj(data, pos + 4)
            jstart = pos + 16
            jend = jstart + jlen
            if jend > end:
                raise ProtocolError(f"JSON length {jlen} exceeds frame length {length}")
            frames.append((frame_id, data[jstart:jend], data[jend:end] if jend != end else b""))
            pos = end
        if pos < n:
            rest = data[pos:] if pos else data
            self._chunks = [rest]
            self._have = n - pos
            self._need = need
        return frames
