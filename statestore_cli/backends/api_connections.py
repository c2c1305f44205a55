"""The connections API mode's requests travel on: one per thread, kept open from one request to the next (HTTP/1.1
keep-alive), so that a walk of thousands of task instances pays the TCP and TLS handshakes once per thread, not
once per request. Where the environment names a proxy for the API's host (``https_proxy``, less ``no_proxy``),
each request goes through ``urllib``'s opener instead, which speaks to the proxy. Either way no redirect is
followed: a 3xx comes back as the answer, for the client to refuse.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from email.message import Message


# The most one answer may hold. A page of the API is at most 100 keys, each value at most the server's
# max_value_storage_bytes (64 KiB unless raised): a few MB. Past this the URL is no api-server (or a hostile
# one) and reading on would only fill memory.
ANSWER_LIMIT = 256 * 1024 * 1024


class AnswerTooLarge(OSError):
    """An answer longer than ``ANSWER_LIMIT``: read no further."""


class Answer(NamedTuple):
    status: int
    text: str
    headers: Message  # http.client's, read with .get(name)


class Connections:
    """Requests to the host of ``base_url``; ``tls`` makes the TLS context of an https URL (raising a
    ``StateStoreError`` for a bad CA bundle) when the first request needs it."""

    def __init__(self, base_url: str, tls: Callable[[], Any], timeout: float) -> None:
        parts = urlsplit(base_url)
        self.scheme, self.host, self.port = parts.scheme, parts.hostname or "", parts.port
        self.prefix = parts.path.rstrip("/")  # an api-server served under a path (/airflow)
        self.tls = tls
        self.timeout = timeout
        self._lock = threading.Lock()
        self._local = threading.local()
        self._opened: list[Any] = []  # every thread's connection, closed together by close()
        self._through: Any = None  # urllib's opener, where a proxy applies (None: not made yet)
        self._proxied: bool | None = None

    def send(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        """One request for ``path`` (below the base URL, with its query), answered whatever its status.
        Raises ``OSError`` (or ``http.client.HTTPException``) when no answer came."""
        if self._proxy_applies():
            return self._through_proxy(method, path, body, headers)
        for retry in (False, True):
            conn = self._connection()
            kept = conn.sock is not None  # used before: the server may have closed it while it sat idle
            try:
                conn.request(method, self.prefix + path, body=body, headers=headers)
                answer = conn.getresponse()
                return Answer(answer.status, _text(answer), answer.headers)
            except (ConnectionResetError, BrokenPipeError):  # RemoteDisconnected is one
                self._drop(conn)
                if retry or not kept:
                    raise
            except BaseException:
                self._drop(conn)  # a timeout or a TLS failure leaves it mid-exchange: the next request opens anew
                raise
        raise AssertionError("unreachable")  # the second try returns or raises

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()

    def _connection(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            import http.client

            if self.scheme == "https":
                conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.tls())
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    def _drop(self, conn: Any) -> None:
        conn.close()
        self._local.conn = None
        with self._lock:
            if conn in self._opened:
                self._opened.remove(conn)

    def _proxy_applies(self) -> bool:
        if self._proxied is None:
            import urllib.request

            proxied = self.scheme in urllib.request.getproxies()
            self._proxied = proxied and not urllib.request.proxy_bypass(self.host)
        return self._proxied

    def _through_proxy(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        import urllib.error
        import urllib.request

        with self._lock:
            if self._through is None:
                tls = urllib.request.HTTPSHandler(context=self.tls())
                self._through = urllib.request.build_opener(tls, _unredirected())
        url = f"{self.scheme}://{_netloc(self.host, self.port)}{self.prefix}{path}"
        request = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            with self._through.open(request, timeout=self.timeout) as answer:
                return Answer(answer.status, _text(answer), answer.headers)
        except urllib.error.HTTPError as refused:
            return Answer(refused.code, _text(refused), refused.headers)
        except urllib.error.URLError as exc:
            reason = exc.reason
            raise reason if isinstance(reason, OSError) else OSError(str(reason)) from None


def _netloc(host: str, port: int | None) -> str:
    shown = f"[{host}]" if ":" in host else host  # an IPv6 address
    return shown if port is None else f"{shown}:{port}"


def _unredirected() -> Any:
    """A redirect handler that follows none: a 3xx comes back as the answer (``HTTPError``)."""
    import urllib.request

    class Unredirected(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return Unredirected()


def _text(answer: Any) -> str:
    """The answer's body as text, refused past ``ANSWER_LIMIT`` without reading the rest."""
    body: bytes = answer.read(ANSWER_LIMIT + 1)
    if len(body) > ANSWER_LIMIT:
        raise AnswerTooLarge(f"an answer larger than {ANSWER_LIMIT >> 20} MiB")
    return body.decode("utf-8", "replace")
