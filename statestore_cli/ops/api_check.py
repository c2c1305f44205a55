"""``db check`` through Airflow's REST API (``--api-url``), for a smoke check where the database cannot be
reached: the api-server answers, runs an Airflow whose API serves the state store, reports its metadata database
healthy, and accepts the credentials. Each problem is reported, not raised, as ``db check`` does on a database."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, NamedTuple

from statestore_cli.db.airflow_versions import STATE_STORE_SINCE
from statestore_cli.errors import BackendError, SchemaMissingError, StateStoreError

if TYPE_CHECKING:
    from statestore_cli.backends.api_client import ApiClient
    from statestore_cli.backends.store import Store


class ApiReport(NamedTuple):
    api: str  # the api-server's root URL
    credentials: str  # where they come from, never what they are
    airflow_version: str | None = None
    metadatabase: str | None = None  # its status as the api-server's health route says it ("healthy")
    dags: int | None = None  # the dags the credentials' user can see
    error: StateStoreError | None = None

    def problem(self) -> StateStoreError | None:
        """Why the store cannot be used through the API; None when it can."""
        return self.error


def api_check(store: Store) -> ApiReport:
    """Ask the API what ``db check`` reports; the first problem found ends the check and is its ``error``."""
    client = store.api_backend().client
    report = ApiReport(client.base_url, client.credentials.source or "none given")
    try:
        report = report._replace(airflow_version=_served_version(client))
        report = report._replace(metadatabase=_database_status(client))
        answer = client.call("GET", "/api/v2/dags", query={"limit": 1})  # any route that needs the token
        return report._replace(dags=_int_or_none(answer, "total_entries"))
    except StateStoreError as exc:
        return report._replace(error=exc)


def _served_version(client: ApiClient) -> str:
    """The api-server's Airflow release, refused when its API has no state store routes."""
    answer = client.public("/api/v2/version")
    version = str(answer.get("version", "")) if isinstance(answer, dict) else ""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise BackendError(f"{client.base_url}/api/v2/version named no Airflow release: not Airflow's api-server?")
    since = tuple(int(part) for part in STATE_STORE_SINCE.split(".")[:2])
    if (int(found[1]), int(found[2])) < since:
        raise SchemaMissingError(
            f"the api-server at {client.base_url} runs Airflow {version}, whose REST API has no state store: "
            f"it needs Airflow {STATE_STORE_SINCE} or later"
        )
    return version


def _database_status(client: ApiClient) -> str:
    """The metadata database's status as the api-server's health route reports it; unhealthy is a problem."""
    answer = client.public("/api/v2/monitor/health")
    database = answer.get("metadatabase") if isinstance(answer, dict) else None
    status = str(database.get("status", "")) if isinstance(database, dict) else ""
    if status != "healthy":
        raise BackendError(
            f"the api-server at {client.base_url} reports its metadata database {status or 'status unknown'}"
        )
    return status


def _int_or_none(answer: Any, field: str) -> int | None:
    value = answer.get(field) if isinstance(answer, dict) else None
    return value if isinstance(value, int) else None
