"""Custom Python policies for the Turnpike API gateway.

A policy is a class with an ``on_request`` and/or ``on_response`` method::

    from turnpike_policy import Policy, Response

    class AddTenant(Policy):
        def __init__(self, config):
            self.header = config["header"]

        def on_request(self, request):
            if request.headers.get("x-block") == "1":
                return Response(status=418, body=b"blocked")
            request.headers[self.header] = "t-" + request.path.rsplit("/", 1)[-1]

        def on_response(self, request, response):
            response.headers["x-seen"] = "1"

Either method may be ``async def``.  Returning ``None`` keeps the (possibly
modified in place) request/response; returning a :class:`Response` answers
early (request phase) or replaces the upstream response (response phase).

The gateway runs the policies in a separate process,
``python -m turnpike_policy.executor``; see :mod:`turnpike_policy.executor`.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping, MutableMapping, ValuesView
from typing import Any, Awaitable, Dict, List, Optional, Tuple, Union
from urllib.parse import parse_qs

__all__ = ["Headers", "Request", "Response", "Consumer", "Policy", "PolicyResult", "__version__"]

__version__ = "0.1.0"


def _check_str(what: str, value: object) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"header {what} must be str, not {type(value).__name__}")


class _HeaderItems(ItemsView):  # type: ignore[type-arg]
    """Every ``(name, value)`` pair of a :class:`Headers`, repeats included."""

    __slots__ = ()
    _mapping: "Headers"

    def __len__(self) -> int:
        return len(self._mapping._pairs)

    def __iter__(self) -> Iterator[Tuple[str, str]]:
        for name, value in list(self._mapping._pairs):
            yield (name, value)

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, tuple) or len(item) != 2:
            return False
        name, value = item
        if not isinstance(name, str):
            return False
        key = name.lower()
        for n, v in self._mapping._pairs:
            if n == key and v == value:
                return True
        return False


class _HeaderValues(ValuesView):  # type: ignore[type-arg]
    """Every value of a :class:`Headers`, repeats included, in order."""

    __slots__ = ()
    _mapping: "Headers"

    def __len__(self) -> int:
        return len(self._mapping._pairs)

    def __iter__(self) -> Iterator[str]:
        for _, value in list(self._mapping._pairs):
            yield value

    def __contains__(self, value: object) -> bool:
        return any(v == value for _, v in self._mapping._pairs)


HeadersInit = Union["Headers", Mapping[str, str], Iterable[Tuple[str, str]], None]


class Headers(MutableMapping[str, str]):
    """Case-insensitive, order-preserving multi-map of HTTP header fields.

    * ``h["X-A"]`` is the first value of ``x-a`` (``KeyError`` when absent);
      ``h.get(name, default=None)`` likewise.
    * ``h[name] = value`` replaces every value of that name (the new field
      takes the position of the first old one, or goes last).
    * ``del h[name]`` removes every value of that name.
    * ``h.add(name, value)`` appends one more field; ``h.get_all(name)``
      returns every value of a name.
    * ``h.items()`` / ``h.values()`` yield every field, repeats included;
      iteration, ``keys()`` and ``len()`` are over *distinct* names.

    Names are stored (and sent to the gateway) lower-cased.
    """

    __slots__ = ("_pairs", "_shared")

    _pairs: List[List[str]]
    _shared: bool

    def __init__(self, data: HeadersInit = None) -> None:
        """Build from a mapping, an iterable of ``(name, value)`` pairs,
        another :class:`Headers` (copied, repeats kept) or nothing."""
        pairs: List[List[str]] = []
        if data is not None:
            if isinstance(data, Headers):
                pairs = list(data._pairs)
            else:
                source: Iterable[Any] = data.items() if isinstance(data, Mapping) else data
                for item in source:
                    name, value = item
                    pairs.append([_check_str("name", name).lower(), _check_str("value", value)])
        self._pairs = pairs
        self._shared = False

    @classmethod
    def _wrap(cls, pairs: List[List[str]]) -> "Headers":
        """Adopt a wire list of ``[name, value]`` pairs without copying it.

        The list is copied on the first modification, so the caller can detect
        a change with ``h._pairs is not pairs and h._pairs != pairs``.  Names
        are trusted to be lower-case already (the gateway guarantees it).
        """
        self = cls.__new__(cls)
        self._pairs = pairs
        self._shared = True
        return self

    def _writable(self) -> List[List[str]]:
        if self._shared:
            self._pairs = list(self._pairs)
            self._shared = False
        return self._pairs

    # -- reading ---------------------------------------------------------

    def __getitem__(self, name: str) -> str:
        key = name.lower()
        for n, v in self._pairs:
            if n == key:
                return v
        raise KeyError(name)

    def get(self, name: str, default: Any = None) -> Any:
        """First value of ``name``, or ``default`` when there is none."""
        key = name.lower()
        for n, v in self._pairs:
            if n == key:
                return v
        return default

    def get_all(self, name: str) -> List[str]:
        """Every value of ``name``, in order (``[]`` when absent)."""
        key = name.lower()
        return [v for n, v in self._pairs if n == key]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        key = name.lower()
        for n, _ in self._pairs:
            if n == key:
                return True
        return False

    def _names(self) -> List[str]:
        seen: Dict[str, None] = {}
        for n, _ in self._pairs:
            seen[n] = None
        return list(seen)

    def __iter__(self) -> Iterator[str]:
        """Distinct (lower-case) names, in order of first appearance."""
        return iter(self._names())

    def __len__(self) -> int:
        """Number of distinct names (see ``len(h.items())`` for fields)."""
        return len({n for n, _ in self._pairs})

    def items(self) -> _HeaderItems:
        """Every ``(name, value)`` field, repeats included, in order."""
        return _HeaderItems(self)

    def values(self) -> _HeaderValues:
        """Every value, repeats included, in order."""
        return _HeaderValues(self)

    # -- writing ---------------------------------------------------------

    def __setitem__(self, name: str, value: str) -> None:
        key = _check_str("name", name).lower()
        _check_str("value", value)
        pairs = self._writable()
        first = -1
        dup = False
        for i, p in enumerate(pairs):
            if p[0] == key:
                if first < 0:
                    first = i
                else:
                    dup = True
                    break
        if first < 0:
            pairs.append([key, value])
            return
        pairs[first] = [key, value]
        if dup:
            self._pairs = pairs[: first + 1] + [p for p in pairs[first + 1 :] if p[0] != key]

    def __delitem__(self, name: str) -> None:
        key = name.lower()
        kept = [p for p in self._pairs if p[0] != key]
        if len(kept) == len(self._pairs):
            raise KeyError(name)
        self._pairs = kept
        self._shared = False

    def add(self, name: str, value: str) -> None:
        """Append a field, keeping existing values of the same name."""
        self._writable().append([_check_str("name", name).lower(), _check_str("value", value)])

    def extend(self, fields: HeadersInit) -> None:
        """Append every field of ``fields`` (repeats kept)."""
        if fields is None:
            return
        self._writable().extend(Headers(fields)._pairs)

    def clear(self) -> None:
        """Remove every field."""
        self._pairs = []
        self._shared = False

    # -- misc ------------------------------------------------------------

    def copy(self) -> "Headers":
        """An independent copy (repeats kept)."""
        return Headers(self)

    def to_list(self) -> List[Tuple[str, str]]:
        """Every field as a list of ``(name, value)`` tuples."""
        return [(n, v) for n, v in self._pairs]

    def _multi(self) -> Dict[str, List[str]]:
        out: Dict[str, List[str]] = {}
        for n, v in self._pairs:
            out.setdefault(n, []).append(v)
        return out

    def __eq__(self, other: object) -> bool:
        """Equal when every name has the same values in the same order
        (the relative order of *different* names is not compared).  A plain
        mapping compares against the first value of every name."""
        if isinstance(other, Headers):
            return self._multi() == other._multi()
        if isinstance(other, Mapping):
            mine = {n: vs[0] for n, vs in self._multi().items()}
            try:
                theirs = {str(k).lower(): v for k, v in other.items()}
            except Exception:
                return False
            return mine == theirs
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Headers({self.to_list()!r})"


class Consumer:
    """The authenticated API consumer (when an auth policy identified one)."""

    __slots__ = ("name", "groups")

    def __init__(self, name: str, groups: Optional[List[str]] = None) -> None:
        self.name: str = name
        self.groups: List[str] = groups if groups is not None else []

    def __repr__(self) -> str:
        return f"Consumer(name={self.name!r}, groups={self.groups!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Consumer):
            return NotImplemented
        return self.name == other.name and self.groups == other.groups

    __hash__ = None  # type: ignore[assignment]


class Request:
    """The client request as seen by a policy.

    ``method``, ``path``, ``query`` (raw, without ``?``), ``headers`` and
    ``body`` can be modified; the gateway applies the changes.  ``body`` is
    ``None`` unless the route asked for the request body to be sent to the
    policy (and always in the response phase).  Assigning a ``str`` body is
    allowed (sent UTF-8 encoded).
    """

    __slots__ = ("method", "path", "query", "headers", "body", "client_ip", "consumer", "jwt", "path_params")

    method: str
    path: str
    query: str
    headers: Headers
    body: Optional[bytes]
    client_ip: str
    consumer: Optional[Consumer]
    jwt: Optional[Dict[str, Any]]
    path_params: Dict[str, str]

    def __init__(
        self,
        method: str = "GET",
        path: str = "/",
        query: str = "",
        headers: HeadersInit = None,
        body: Optional[bytes] = None,
        client_ip: str = "",
        consumer: Optional[Consumer] = None,
        jwt: Optional[Dict[str, Any]] = None,
        path_params: Optional[Dict[str, str]] = None,
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers if isinstance(headers, Headers) else Headers(headers)
        self.body = body
        self.client_ip = client_ip
        self.consumer = consumer
        self.jwt = jwt
        self.path_params = path_params if path_params is not None else {}

    @property
    def query_params(self) -> Dict[str, List[str]]:
        """The current ``query`` parsed with ``parse_qs(keep_blank_values=True)``.

        A fresh dict on every access: change ``request.query`` to change the
        query string (e.g. with ``urllib.parse.urlencode(params, doseq=True)``).
        """
        return parse_qs(self.query, keep_blank_values=True)

    def __repr__(self) -> str:
        q = f"?{self.query}" if self.query else ""
        return f"<Request {self.method} {self.path}{q}>"


class Response:
    """An HTTP response: returned by a policy to answer early / replace the
    upstream response, or handed to ``on_response`` for in-place changes.

    ``body`` is ``None`` in ``on_response`` when the route did not ask for
    the response body.  ``str`` bodies are encoded as UTF-8.
    """

    __slots__ = ("status", "headers", "body")

    status: int
    headers: Headers
    body: Optional[bytes]

    def __init__(
        self,
        status: int = 200,
        body: Union[bytes, bytearray, memoryview, str, None] = b"",
        headers: HeadersInit = None,
    ) -> None:
        self.status = status
        if isinstance(body, str):
            body = body.encode("utf-8")
        elif body is not None and not isinstance(body, bytes):
            body = bytes(body)
        self.body = body
        self.headers = Headers(headers)

    def __repr__(self) -> str:
        n = "None" if self.body is None else f"{len(self.body)} bytes"
        return f"<Response {self.status} body={n}>"


#: What ``on_request`` / ``on_response`` may return (or resolve to when async).
PolicyResult = Union[Optional[Response], Awaitable[Optional[Response]]]


class Policy:
    """Base class for policies.

    Override ``on_request`` and/or ``on_response`` (plain or ``async def``).
    The gateway only calls the phases a subclass overrides.
    """

    config: Dict[str, Any]

    def __init__(self, config: Optional[Dict[str, Any]] = None) -> None:
        """``config`` is the policy's mapping from the gateway YAML (``{}`` when none)."""
        self.config = config if config is not None else {}

    def on_request(self, request: Request) -> PolicyResult:
        """Inspect/modify ``request``; return a :class:`Response` to answer early."""
        return None

    def on_response(self, request: Request, response: Response) -> PolicyResult:
        """Inspect/modify ``response``; return a :class:`Response` to replace it."""
        return None
