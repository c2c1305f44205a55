"""PyMySQL's preferred TLS mode with one shared context (statestore_cli.db.mysql_tls), on the MariaDB server."""

from __future__ import annotations

import ssl

import pytest
from sqlalchemy.exc import OperationalError

from statestore_cli.db.database import make_engine
from statestore_cli.db.mysql_tls import preferred_tls


@pytest.mark.parametrize("db_url", ["mariadb"], indirect=True)
def test_connections_share_one_context_that_verifies_nothing_as_pymysql_would(db_url):
    engine = make_engine(db_url)
    try:
        with engine.connect() as first, engine.connect() as second:
            contexts = [conn.connection.dbapi_connection.ctx for conn in (first, second)]
            assert first.exec_driver_sql("SELECT 1").scalar_one() == 1
            assert second.exec_driver_sql("SELECT 2").scalar_one() == 2
    finally:
        engine.dispose()
    assert contexts[0] is contexts[1] is preferred_tls()
    # PyMySQL's preferred mode: TLS when the server offers it, the certificate and host name unchecked.
    assert contexts[0].verify_mode == ssl.CERT_NONE and not contexts[0].check_hostname
    assert contexts[0].protocol == ssl.PROTOCOL_TLS_CLIENT


@pytest.mark.parametrize("db_url", ["mariadb"], indirect=True)
def test_tls_options_in_the_url_are_left_to_pymysql(db_url):
    engine = make_engine(db_url + "?ssl_disabled=true")
    try:
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert raw.ssl is False and getattr(raw, "ctx", None) is not preferred_tls()
    finally:
        engine.dispose()
    # Verification asked for: PyMySQL's own context, which cannot verify this server (no TLS, or a
    # certificate no CA signed), so connecting fails rather than quietly going unverified.
    engine = make_engine(db_url + "?ssl_verify_cert=true", connect_timeout=5)
    try:
        with pytest.raises(OperationalError, match=r"SSL|certificate"), engine.connect():
            pass
    finally:
        engine.dispose()
