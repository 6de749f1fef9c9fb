"""The policy executor process.

Started by the gateway as::

    python -m turnpike_policy.executor --socket <unix socket path> --policies <json file>

It imports and instantiates every configured policy, prints one JSON line on
stdout (``{"ready": ...}`` or ``{"error": ...}``), then serves framed requests
(see :mod:`turnpike_policy.protocol`) on the Unix socket until stdin reaches
EOF or it receives SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import inspect
import os
import signal
import socket
import stat
import sys
import threading
import traceback
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from . import Consumer, Headers, Policy, Request, Response
from .protocol import FrameDecoder, ProtocolError, dumps, encode_frame, loads

__all__ = ["main", "LoadedPolicy", "load_policies", "PolicyLoadError"]

_BASE_ON_REQUEST = Policy.on_request
_BASE_ON_RESPONSE = Policy.on_response

_isawaitable = inspect.isawaitable


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


class PolicyLoadError(Exception):
    """A policy could not be imported or constructed."""

    def __init__(self, spec: Dict[str, Any], message: str, tb: str) -> None:
        super().__init__(message)
        self.spec = spec
        self.message = message
        self.tb = tb

    def to_json(self) -> Dict[str, Any]:
        return {
            "error": {
                "id": self.spec.get("id"),
                "module": self.spec.get("module"),
                "class": self.spec.get("class"),
                "message": self.message,
                "traceback": self.tb,
            }
        }


def _short(exc: BaseException) -> str:
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _format_tb(exc: BaseException, skip_own_frame: bool = True) -> str:
    tb = exc.__traceback__
    if skip_own_frame and tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _overrides(cls: type, name: str, base_fn: Any) -> bool:
    fn = getattr(cls, name, None)
    return fn is not None and fn is not base_fn and callable(fn)


class LoadedPolicy:
    """One instantiated policy with its precomputed dispatch information."""

    __slots__ = ("id", "instance", "on_request", "request_async", "on_response", "response_async")

    def __init__(self, pid: Any, instance: Any, has_request: bool, has_response: bool) -> None:
        self.id = pid
        self.instance = instance
        self.on_request = instance.on_request if has_request else None
        self.request_async = has_request and inspect.iscoroutinefunction(self.on_request)
        self.on_response = instance.on_response if has_response else None
        self.response_async = has_response and inspect.iscoroutinefunction(self.on_response)


def _load_one(spec: Dict[str, Any]) -> LoadedPolicy:
    module_name = spec.get("module")
    class_name = spec.get("class")
    if not isinstance(module_name, str) or not module_name:
        raise TypeError("policy entry needs a non-empty string 'module'")
    if not isinstance(class_name, str) or not class_name:
        raise TypeError("policy entry needs a non-empty string 'class'")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in class_name.split("."):
        obj = getattr(obj, part)
    cls = obj
    if not isinstance(cls, type):
        raise TypeError(f"{module_name}.{class_name} is not a class")
    has_request = _overrides(cls, "on_request", _BASE_ON_REQUEST)
    has_response = _overrides(cls, "on_response", _BASE_ON_RESPONSE)
    if not issubclass(cls, Policy) and not (has_request or has_response):
        raise TypeError(
            f"{module_name}.{class_name} is not a turnpike_policy.Policy subclass "
            "and defines neither on_request nor on_response"
        )
    config = spec.get("config")
    instance = cls(config if config is not None else {})
    return LoadedPolicy(spec.get("id"), instance, has_request, has_response)


def load_policies(specs: Sequence[Dict[str, Any]]) -> Dict[Any, LoadedPolicy]:
    """Import and instantiate every policy; raise :class:`PolicyLoadError` on
    the first failure."""
    loaded: Dict[Any, LoadedPolicy] = {}
    for spec in specs:
        if not isinstance(spec, dict):
            raise PolicyLoadError({}, f"TypeError: policy entry must be an object, not {type(spec).__name__}", "")
        try:
            lp = _load_one(spec)
        except Exception as exc:  # noqa: BLE001 - everything is reported
            raise PolicyLoadError(spec, _short(exc), _format_tb(exc, skip_own_frame=False)) from None
        if lp.id in loaded:
            raise PolicyLoadError(spec, f"ValueError: duplicate policy id {lp.id!r}", "")
        loaded[lp.id] = lp
    return loaded


# --------------------------------------------------------------------------
# Request handling
# --------------------------------------------------------------------------

_NOOP_CONTINUE = b'{"action":"continue","body":false}'
_PHASE_REQUEST = 0
_PHASE_RESPONSE = 1


class _Malformed(Exception):
    pass


def _error_frame(fid: int, message: str, tb: Optional[str] = None) -> bytes:
    msg: Dict[str, Any] = {"action": "error", "message": message}
    if tb is not None:
        msg["traceback"] = tb
    return encode_frame(fid, dumps(msg))


def _exception_frame(fid: int, exc: BaseException) -> bytes:
    return _error_frame(fid, _short(exc), _format_tb(exc))


def _as_body(value: Any) -> bytes:
    if value is None:
        return b""
    if type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"body must be bytes, str or None, not {type(value).__name__}")


def _as_headers(value: Any, what: str) -> Headers:
    if isinstance(value, Headers):
        return value
    if value is None:
        return Headers()
    try:
        return Headers(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be Headers, a mapping or (name, value) pairs: {exc}") from None


def _check_str(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"{what} must be str, not {type(value).__name__}")


def _check_status(value: Any) -> int:
    if type(value) is int and 100 <= value <= 999:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 999:
        return int(value)
    raise TypeError(f"status must be an int between 100 and 999, not {value!r}")


# State carried from preparation to reply building:
# (phase, msg, request, original request header pairs, original body,
#  response, original response header pairs, original response body)
_State = Tuple[int, Dict[str, Any], Request, Any, Optional[bytes], Optional[Response], Any, Optional[bytes]]


def _prepare(
    policies: Dict[Any, LoadedPolicy], msg: Any, body: bytes
) -> Optional[Tuple[Any, bool, Tuple[Any, ...], _State]]:
    """Build the policy arguments; None means the phase is not implemented."""
    if type(msg) is not dict:
        raise _Malformed("malformed request: expected a JSON object")
    try:
        pol = policies.get(msg["policy"])
        phase = msg["phase"]
        req = Request.__new__(Request)
        req.method = msg["method"]
        req.path = msg["path"]
        req.query = msg.get("query") or ""
        hpairs = msg["headers"]
        req.headers = Headers._wrap(hpairs)
        req.client_ip = msg.get("client") or ""
        consumer = msg.get("consumer")
        req.consumer = None if consumer is None else Consumer(consumer["name"], consumer.get("groups") or [])
        req.jwt = msg.get("jwt")
        pp = msg.get("pathParams")
        req.path_params = pp if pp is not None else {}
    except KeyError as exc:
        raise _Malformed(f"malformed request: missing field {exc}") from None
    except TypeError as exc:
        if "unhashable" in str(exc):
            raise _Malformed(f"unknown policy id {msg.get('policy')!r}") from None
        raise _Malformed(f"malformed request: {exc}") from None
    if pol is None:
        raise _Malformed(f"unknown policy id {msg.get('policy')!r}")
    if type(hpairs) is not list:
        raise _Malformed("malformed request: headers must be a list of [name, value] pairs")
    if phase == "request":
        rbody = body if msg.get("body") else None
        req.body = rbody
        fn = pol.on_request
        if fn is None:
            return None
        return fn, pol.request_async, (req,), (_PHASE_REQUEST, msg, req, hpairs, rbody, None, None, None)
    if phase == "response":
        req.body = None
        r = msg.get("response")
        if type(r) is not dict:
            raise _Malformed("malformed request: response phase needs a 'response' object")
        try:
            resp = Response.__new__(Response)
            resp.status = r["status"]
            rpairs = r["headers"]
        except KeyError as exc:
            raise _Malformed(f"malformed request: missing field response.{exc.args[0]}") from None
        if type(rpairs) is not list:
            raise _Malformed("malformed request: response.headers must be a list of [name, value] pairs")
        resp.headers = Headers._wrap(rpairs)
        rbody = body if msg.get("responseBody") else None
        resp.body = rbody
        fn = pol.on_response
        if fn is None:
            return None
        return fn, pol.response_async, (req, resp), (_PHASE_RESPONSE, msg, req, hpairs, None, resp, rpairs, rbody)
    raise _Malformed(f"malformed request: unknown phase {phase!r}")


def _reply(fid: int, result: Any, st: _State) -> bytes:
    """Build the reply frame for a policy's return value."""
    phase, msg, req, hpairs, body0, resp, rpairs, rbody0 = st
    if result is not None and result is not resp:
        if not isinstance(result, Response):
            name = "on_request" if phase == _PHASE_REQUEST else "on_response"
            raise TypeError(f"{name} must return None or a Response, not {type(result).__name__}")
        out_h = _as_headers(result.headers, "Response.headers")
        return encode_frame(
            fid,
            dumps({"action": "respond", "status": _check_status(result.status), "headers": out_h._pairs}),
            _as_body(result.body),
        )

    out: Dict[str, Any] = {"action": "continue"}
    send_body: Optional[bytes] = None
    if phase == _PHASE_REQUEST:
        changes: Dict[str, Any] = {}
        v = req.method
        if v != msg["method"]:
            changes["method"] = _check_str(v, "request.method")
        v = req.path
        if v != msg["path"]:
            changes["path"] = _check_str(v, "request.path")
        v = req.query
        if v != (msg.get("query") or ""):
            changes["query"] = _check_str(v, "request.query")
        h = req.headers
        if type(h) is not Headers:
            h = _as_headers(h, "request.headers")
        p = h._pairs
        if p is not hpairs and p != hpairs:
            changes["headers"] = p
        if changes:
            out["request"] = changes
        b = req.body
        if b is not body0:
            b = _as_body(b)
            if body0 is None or b != body0:
                send_body = b
    else:
        assert resp is not None
        rchanges: Dict[str, Any] = {}
        s = resp.status
        if s != msg["response"]["status"]:
            rchanges["status"] = _check_status(s)
        h = resp.headers
        if type(h) is not Headers:
            h = _as_headers(h, "response.headers")
        p = h._pairs
        if p is not rpairs and p != rpairs:
            rchanges["headers"] = p
        if rchanges:
            out["response"] = rchanges
        b = resp.body
        if b is not rbody0:
            b = _as_body(b)
            if rbody0 is None or b != rbody0:
                send_body = b
    if send_body is None:
        if len(out) == 1:
            return encode_frame(fid, _NOOP_CONTINUE)
        out["body"] = False
        return encode_frame(fid, dumps(out))
    out["body"] = True
    return encode_frame(fid, dumps(out), send_body)


class _Server:
    """Shared state: the policies and every live connection."""

    def __init__(self, policies: Dict[Any, LoadedPolicy]) -> None:
        self.policies = policies
        self.connections: Set["_Connection"] = set()


class _Connection(asyncio.Protocol):
    """One gateway connection: frames in, replies out, many in flight."""

    __slots__ = ("_server", "_policies", "_transport", "_decoder", "_tasks", "_loop")

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._policies = server.policies
        self._transport: Optional[asyncio.Transport] = None
        self._decoder = FrameDecoder()
        self._tasks: Set["asyncio.Task[None]"] = set()
        self._loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._server.connections.add(self)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._server.connections.discard(self)
        self._transport = None
        for t in list(self._tasks):
            t.cancel()
        self._tasks.clear()

    def pause_writing(self) -> None:
        # The gateway is not reading our replies: stop reading its requests.
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            print(f"turnpike_policy.executor: closing connection: {exc}", file=sys.stderr)
            if self._transport is not None:
                self._transport.abort()
            return
        if not frames:
            return
        policies = self._policies
        replies: List[bytes] = []
        for fid, jb, body in frames:
            try:
                prep = _prepare(policies, loads(jb), body)
            except _Malformed as exc:
                replies.append(_error_frame(fid, str(exc)))
                continue
            except Exception as exc:  # noqa: BLE001 - invalid JSON etc.
                replies.append(_error_frame(fid, f"malformed request: {_short(exc)}"))
                continue
            if prep is None:
                replies.append(encode_frame(fid, _NOOP_CONTINUE))
                continue
            fn, is_async, args, st = prep
            try:
                result = fn(*args)
                if is_async or (
                    result is not None and not isinstance(result, Response) and _isawaitable(result)
                ):
                    self._spawn(fid, result, st)
                    continue
                replies.append(_reply(fid, result, st))
            except Exception as exc:  # noqa: BLE001 - reported to the gateway
                replies.append(_exception_frame(fid, exc))
        if replies:
            t = self._transport
            if t is not None and not t.is_closing():
                t.write(replies[0] if len(replies) == 1 else b"".join(replies))

    def _spawn(self, fid: int, awaitable: Any, st: _State) -> None:
        task = self._loop.create_task(self._run(fid, awaitable, st))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, fid: int, awaitable: Any, st: _State) -> None:
        try:
            result = await awaitable
            frame = _reply(fid, result, st)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported to the gateway
            frame = _exception_frame(fid, exc)
        t = self._transport
        if t is not None and not t.is_closing():
            t.write(frame)


# --------------------------------------------------------------------------
# Process lifecycle
# --------------------------------------------------------------------------


class _ProtocolOut:
    """The stdout line channel, detached from ``sys.stdout``.

    At start-up fd 1 is duplicated to a private descriptor and fd 1 (and
    ``sys.stdout``) are pointed at stderr, so nothing a policy prints -- even
    at import time, even from C code -- can corrupt the protocol lines.  The
    private descriptor stays open for the life of the process, so the gateway
    sees EOF on the executor's stdout exactly when the process ends.
    """

    def __init__(self) -> None:
        self.fd = -1
        try:
            self.fd = os.dup(1)
        except OSError:
            self.fd = -1
        try:
            sys.stdout.flush()
        except Exception:  # noqa: BLE001
            pass
        try:
            os.dup2(2, 1)
        except OSError:
            pass
        sys.stdout = sys.stderr

    def line(self, obj: Any) -> None:
        data = dumps(obj) + b"\n"
        if self.fd < 0:
            return
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]


def _parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m turnpike_policy.executor", description=__doc__.split("\n")[0])
    ap.add_argument("--socket", required=True, help="Unix socket path to listen on")
    ap.add_argument("--policies", required=True, help="JSON file: {path: [...], policies: [...]}")
    return ap.parse_args(argv)


def _bind(path: str) -> Tuple[socket.socket, Tuple[int, int]]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISSOCK(st.st_mode):
            os.unlink(path)
        else:
            raise FileExistsError(f"{path} exists and is not a socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        sock.listen(1024)
        sock.setblocking(False)
        st = os.stat(path)
    except BaseException:
        sock.close()
        raise
    return sock, (st.st_dev, st.st_ino)


def _unlink_if_ours(path: str, ident: Tuple[int, int]) -> None:
    try:
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) == ident:
            os.unlink(path)
    except OSError:
        pass


async def _serve(sock: socket.socket, server: _Server) -> None:
    loop = asyncio.get_running_loop()
    stop = loop.create_future()

    def request_stop() -> None:
        if not stop.done():
            stop.set_result(None)

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, request_stop)
        except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover
            pass

    # Exit on stdin EOF: the gateway holds the write end of our stdin pipe.
    def stdin_readable() -> None:
        try:
            data = os.read(0, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(0)
            request_stop()

    watching = False
    try:
        loop.add_reader(0, stdin_readable)
        watching = True
    except (OSError, ValueError, NotImplementedError, PermissionError):
        watching = False
    if not watching:
        # Regular file, closed fd, or a loop that cannot watch it: use a thread.
        def stdin_thread() -> None:
            try:
                while os.read(0, 65536):
                    pass
            except OSError:
                pass
            loop.call_soon_threadsafe(request_stop)

        threading.Thread(target=stdin_thread, name="stdin-watch", daemon=True).start()

    srv = await loop.create_unix_server(lambda: _Connection(server), sock=sock)
    try:
        await stop
    finally:
        srv.close()
        for conn in list(server.connections):
            t = conn._transport
            if t is not None:
                t.abort()
        if watching:
            try:
                loop.remove_reader(0)
            except Exception:  # noqa: BLE001
                pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``python -m turnpike_policy.executor``; returns the exit status."""
    args = _parse_args(argv)
    out = _ProtocolOut()

    def fail(spec: Dict[str, Any], message: str, tb: str) -> int:
        out.line(PolicyLoadError(spec, message, tb).to_json())
        return 2

    try:
        with open(args.policies, "rb") as f:
            conf = loads(f.read())
        if not isinstance(conf, dict):
            raise TypeError("policies file must hold a JSON object")
        paths = conf.get("path") or []
        specs = conf.get("policies") or []
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise TypeError("'path' must be a list of strings")
        if not isinstance(specs, list):
            raise TypeError("'policies' must be a list")
    except Exception as exc:  # noqa: BLE001
        return fail({}, _short(exc), _format_tb(exc, skip_own_frame=False))

    sys.path[0:0] = paths
    try:
        policies = load_policies(specs)
    except PolicyLoadError as exc:
        out.line(exc.to_json())
        return 2

    try:
        sock, ident = _bind(args.socket)
    except Exception as exc:  # noqa: BLE001
        return fail({}, _short(exc), _format_tb(exc, skip_own_frame=False))

    try:
        loop_factory = None
        if os.environ.get("TURNPIKE_POLICY_PURE", "") in ("", "0"):
            try:
                loop_factory = importlib.import_module("uvloop").new_event_loop
            except ImportError:
                loop_factory = None
        loop = loop_factory() if loop_factory is not None else asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        server = _Server(policies)
        # Long-lived objects (modules, policies) need not be scanned by the GC again.
        gc.collect()
        if hasattr(gc, "freeze"):
            gc.freeze()
        out.line(
            {
                "ready": True,
                "pid": os.getpid(),
                "policies": [
                    {"id": p.id, "request": p.on_request is not None, "response": p.on_response is not None}
                    for p in policies.values()
                ],
            }
        )
        try:
            loop.run_until_complete(_serve(sock, server))
        finally:
            try:
                _cancel_all(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()
    finally:
        _unlink_if_ours(args.socket, ident)
        try:
            sock.close()
        except OSError:
            pass
    return 0


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not tasks:
        return
    for t in tasks:
        t.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


if __name__ == "__main__":
    sys.exit(main())
