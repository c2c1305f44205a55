"""PyMySQL connections without the CA store load its default TLS mode pays on each one.

Given no TLS option, PyMySQL (1.2 and later) connects in a "preferred" mode: TLS when the server offers
it, plain when not, and the server's certificate never checked. For that it builds a default SSL context
for every connection, which loads the system's CA store, a noticeable share of a command's start-up,
for certificates it then does not verify. A command pays it once, ``stats`` once per connection it reads on, one after
the other. Connections made here share one context with the same settings (a TLS client, no hostname
check, no verification) built without the CA store. Any TLS option in the URL (``ssl_ca``,
``ssl_verify_cert``, ``ssl_disabled`` ...) leaves everything to PyMySQL, as before.
"""

from __future__ import annotations

import ssl
from functools import cache
from typing import Any


@cache
def preferred_tls() -> ssl.SSLContext:
    """What PyMySQL's preferred mode builds, minus the CA store it never consults."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@cache
def _connection_class() -> type:
    from pymysql.connections import Connection  # type: ignore[import-untyped]

    class PreferredTlsConnection(Connection):  # type: ignore[misc]  # PyMySQL ships no types
        def _create_ssl_ctx(self, sslp: Any) -> Any:
            # PyMySQL asks with {} in the preferred mode only; options from the URL come as a filled dict.
            if isinstance(sslp, dict) and not sslp:
                return preferred_tls()
            return super()._create_ssl_ctx(sslp)

    return PreferredTlsConnection


def connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
    """SQLAlchemy's ``do_connect`` event for a PyMySQL engine: the connection, made as above."""
    return _connection_class()(*cargs, **cparams)
