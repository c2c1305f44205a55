"""Airflow's REST API as statestore talks to it (``--api-url``): JSON requests on one base URL, a bearer token
(given, or exchanged for a username and password at ``/auth/token``), TLS verified (with a CA bundle where
given), retries with backoff on 429 and 5xx answers, and each failure as one ``StateStoreError`` that says what
went wrong and what to do, never the token.

The standard library only (``http.client`` on connections kept open, ``api_connections``): an API-mode command
loads no HTTP client package, and nothing here is imported on a database command's path.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode, urljoin, urlsplit

from statestore_cli.backends.api_connections import AnswerTooLarge, Connections
from statestore_cli.errors import BackendError, ConfigError, InvalidInputError, NotFoundError, first_line
from statestore_cli.masking import register_secret

RETRIED = frozenset({429, 502, 503, 504})  # the server asks to slow down, or a proxy in front of it is not ready
ATTEMPTS = 4  # the first request and three retries
BACKOFF = 0.5  # seconds before the first retry, doubled for each next one (a Retry-After of the server wins)
RETRY_AFTER_MAX = 30.0

# Which role of Airflow's simple auth manager an operation needs, as a refusal names it.
ROLE_READ = "VIEWER"
ROLE_WRITE = "USER"
ROLE_ASSET_WRITE = "OP"


class Credentials:
    """How requests are authorized: a ``token`` as it is, or a ``username`` and ``password`` exchanged for one
    at ``/auth/token`` on first use (Airflow's simple auth manager). ``renew``: how to get a new token when the
    API stops taking this one (it expired while a long walk ran), as the command that gave it, run again."""

    def __init__(
        self,
        token: str = "",
        username: str = "",
        password: str = "",
        *,
        source: str = "",
        renew: Callable[[], str] | None = None,
    ) -> None:
        self.token = token
        self.username = username
        self.password = password
        self.source = source  # where they came from, as a message names it
        self.renew = renew

    def __bool__(self) -> bool:
        return bool(self.token or (self.username and self.password))


def segment(text: str) -> str:
    """``text`` as one path segment: every reserved character escaped (a key may hold ``/``)."""
    return quote(text, safe="")


class ApiClient:
    """Requests to the API at ``base_url`` (``https://airflow.example.com``: the api-server's root)."""

    def __init__(self, base_url: str, credentials: Credentials, *, ca_bundle: str = "", timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.credentials = credentials
        self.ca_bundle = ca_bundle
        self.timeout = timeout
        self.requests = 0  # requests sent, retries and the token exchange included
        self._token = credentials.token
        self._context: Any = None
        self.connections = Connections(self.base_url, self._tls_context, timeout)
        self._lock = threading.RLock()  # requests may come from several threads (a walk's)

    # -- requests -----------------------------------------------------------------------------------------
    def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        role: str = ROLE_READ,
        missing: str | None = None,
    ) -> Any:
        """The decoded JSON answer of ``method path`` (None for an empty one). ``missing``: what a 404 means,
        as a ``NotFoundError`` says it (None: the server's own words); ``role``: what a 403 names."""
        self.authorize()
        used = self._token
        status, text = self._send(method, path, query, body, authorized=True)
        if _credentials_refused(status, text) and self._renewed(used):
            status, text = self._send(method, path, query, body, authorized=True)  # once, with the new token
        if status < 300:
            return self._decoded(path, text) if text.strip() else None
        raise self._refusal(status, text, method, role, missing)

    def public(self, path: str) -> Any:
        """The decoded JSON answer of ``GET path`` on a route that needs no token (``/api/v2/version``)."""
        status, text = self._send("GET", path, None, None, authorized=False)
        if status < 300:
            return self._decoded(path, text)
        if status == 404:  # the route every Airflow 3 serves: this is no such api-server
            raise BackendError(f"{self.base_url} has no {path}: is it Airflow 3's api-server?")
        raise self._refusal(status, text, "GET", ROLE_READ, None)

    def _decoded(self, path: str, text: str) -> Any:
        """A successful answer's JSON; a page that is none (a sign-on page, a UI) is this URL's problem."""
        try:
            return json.loads(text)
        except ValueError:
            raise BackendError(
                f"the API at {self.base_url} answered {path} with a page that is not JSON: is --api-url the "
                "api-server's root, where /api/v2 is served?"
            ) from None

    def authorize(self) -> None:
        """Have a token: the one given, or one exchanged for the username and password (once)."""
        with self._lock:
            if not self._token:
                self._token = self._exchange()

    def _renewed(self, refused: str) -> bool:
        """A new token in place of ``refused``, which the API no longer takes: the command that gave it run
        again, or the username and password exchanged again; False when there is no other way to get one, or
        it gives the same token. Once for all threads: those refused the same token meanwhile use the new one."""
        creds = self.credentials
        with self._lock:
            if self._token != refused:
                return True
            if creds.renew is not None:
                fresh = creds.renew()
            elif creds.username and creds.password:
                fresh = self._exchange()
            else:
                return False
            if not fresh or fresh == refused:
                return False
            register_secret(fresh)
            self._token = fresh
            return True

    def _exchange(self) -> str:
        """A token for the username and password (``POST /auth/token``)."""
        creds = self.credentials
        if not creds:
            raise ConfigError(
                f"no credentials for the API at {self.base_url}",
                hint="set STATESTORE_API_TOKEN (or AIRFLOW_CLI_TOKEN) to a token, or STATESTORE_API_USERNAME and "
                "STATESTORE_API_PASSWORD; see docs/api-mode.md for a managed service's token",
            )
        body = {"username": creds.username, "password": creds.password}
        status, text = self._send("POST", "/auth/token", None, body, authorized=False)
        if status in (401, 403):
            raise ConfigError(
                f"the API at {self.base_url} refused the username and password{_from(creds)} ({status})",
                hint="check them; a deployment without Airflow's simple auth manager hands out tokens its own way: "
                "set STATESTORE_API_TOKEN instead",
            )
        if status >= 300:
            raise self._refusal(status, text, "POST", ROLE_READ, "no /auth/token route (not Airflow's api-server?)")
        token = _json_or_none(text)
        if not isinstance(token, dict) or not isinstance(token.get("access_token"), str):
            raise BackendError(f"the API at {self.base_url} answered /auth/token without an access_token")
        register_secret(token["access_token"])
        return str(token["access_token"])

    def _send(
        self, method: str, path: str, query: Mapping[str, Any] | None, body: Any, *, authorized: bool
    ) -> tuple[int, str]:
        import http.client

        target = path + (("?" + urlencode(query)) if query else "")
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if authorized:
            headers["Authorization"] = f"Bearer {self._token}"
        for attempt in range(ATTEMPTS):
            with self._lock:
                self.requests += 1
            try:
                answer = self.connections.send(method, target, data, headers)
            except (OSError, http.client.HTTPException) as exc:
                raise self._unreachable(exc) from None
            if 300 <= answer.status < 400:
                raise self._redirected(path, answer.status, self.base_url + target, answer.headers.get("Location"))
            if answer.status not in RETRIED or attempt == ATTEMPTS - 1:
                return answer.status, answer.text
            time.sleep(_pause(attempt, answer.headers.get("Retry-After")))
        raise AssertionError("unreachable")  # the loop returns or raises

    def close(self) -> None:
        """Close the connections kept open between requests."""
        self.connections.close()

    def _tls_context(self) -> Any:
        with self._lock:
            return self._tls_made()

    def _tls_made(self) -> Any:
        if self._context is None and self.base_url.startswith("https:"):
            import ssl

            try:
                self._context = ssl.create_default_context(cafile=self.ca_bundle or None)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"cannot read the CA bundle {self.ca_bundle}: {first_line(exc)}",
                    hint="give a PEM file of the certificates that sign the API's ([state_store] api_ca_bundle)",
                ) from None
        return self._context

    # -- failures -----------------------------------------------------------------------------------------
    def _unreachable(self, reason: BaseException) -> BackendError:
        import socket
        import ssl

        if isinstance(reason, ssl.SSLCertVerificationError):
            return BackendError(
                f"the API at {self.base_url} has a certificate that cannot be verified "
                f"({getattr(reason, 'verify_message', None) or first_line(reason)}): give the CA bundle that "
                "signs it ([state_store] api_ca_bundle); statestore never turns verification off"
            )
        if isinstance(reason, ssl.SSLError):
            return BackendError(f"TLS failed with the API at {self.base_url}: {first_line(reason)}")
        if isinstance(reason, (TimeoutError, socket.timeout)):
            return BackendError(
                f"the API at {self.base_url} did not answer within {self.timeout:g}s: check that it is up, or "
                "raise --connect-timeout"
            )
        if isinstance(reason, AnswerTooLarge):
            return BackendError(
                f"the API at {self.base_url} sent {reason}, more than any page of Airflow's API holds; statestore "
                "stopped reading: is --api-url an Airflow api-server's root?"
            )
        if isinstance(reason, ConnectionRefusedError):
            return BackendError(f"nothing answers at {self.base_url} (connection refused): is the api-server up?")
        return BackendError(f"cannot reach the API at {self.base_url}: {first_line(reason)}")

    def _redirected(self, path: str, status: int, url: str, location: str | None) -> ConfigError:
        """A redirect, never followed: the token would go with it, to wherever it points (a login page, another
        host, plain http); the URL is shown without its query or credentials."""
        target = urlsplit(urljoin(url, location or ""))
        where = f"{target.scheme}://{target.hostname or ''}{f':{target.port}' if target.port else ''}{target.path}"
        return ConfigError(
            f"the API at {self.base_url} answered {path} with a redirect ({status}) to {where}, which statestore "
            "does not follow (the token would go with it)",
            hint="give --api-url the api-server's own root, where /api/v2 is served",
        )

    def _refusal(self, status: int, text: str, method: str, role: str, missing: str | None) -> Exception:
        detail = _detail(text)
        if _credentials_refused(status, text):
            return ConfigError(
                f"the API at {self.base_url} did not accept the credentials{_from(self.credentials)} ({detail})",
                hint="the token may have expired: get a new one, or give STATESTORE_API_USERNAME and "
                "STATESTORE_API_PASSWORD",
            )
        if status == 403:
            return ConfigError(
                f"the API at {self.base_url} refused this {method} ({detail}): the user needs Airflow's "
                f"{role} role (or a token whose user has it)",
                hint="ask an Airflow admin for that role, or use a token of a user who has it",
            )
        if status == 404:
            return NotFoundError(missing or detail)
        if status == 422:
            return InvalidInputError(f"the API refused the request: {detail}")
        return BackendError(f"the API at {self.base_url} answered {status}: {detail}")


def api_label(url: str) -> str:
    """The API at ``url`` as a metrics file's ``database`` label names it: its host, with its port when given, and
    its path (``airflow.example.com/team-a``); never a user or password (an API URL with one is refused)."""
    parts = urlsplit(url)
    host = parts.hostname or "unknown"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return host + parts.path.rstrip("/")


def _from(creds: Credentials) -> str:
    return f" from {creds.source}" if creds.source else ""


def _credentials_refused(status: int, text: str) -> bool:
    # Airflow answers a token it cannot read (expired, signed by another deployment) with 403
    # "Invalid JWT token": that is the credentials, not a role.
    return status == 401 or (status == 403 and "token" in _detail(text).lower())


def _pause(attempt: int, retry_after: str | None) -> float:
    if retry_after is not None:
        try:
            return min(max(float(retry_after), 0.0), RETRY_AFTER_MAX)
        except ValueError:
            pass  # an HTTP date: the backoff instead
    return float(BACKOFF * 2**attempt)


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _detail(text: str) -> str:
    """The server's reason, in one line: FastAPI's ``detail`` (a validation error's messages joined)."""
    answer = _json_or_none(text)
    detail = answer.get("detail") if isinstance(answer, dict) else None
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                where = ".".join(str(part) for part in item.get("loc", []) if part != "body")
                parts.append(f"{where}: {item.get('msg', '')}" if where else str(item.get("msg", "")))
        detail = "; ".join(parts)
    lines = str(detail or text).strip().splitlines()
    return lines[0][:300] if lines else "no reason given"
