"""config/grafana/statestore.json: a Grafana 10/11 dashboard over the metrics files, per database.

Its JSON is checked for what an import needs (schema version, a templated Prometheus data source, the
``database`` variable); every PromQL expression is checked by promtool, asks only for metrics a real clean
and stats write, and filters by ``$database``; and a real Prometheus scraping the real node-exporter shows
data in every query of every panel, for each database alone and for all of them.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_running import run_cli
from monitoring import (
    PROMETHEUS,
    PROMTOOL,
    Monitored,
    Server,
    airflow34_store,
    http_get,
    monitored_databases,
    prometheus,
    query,
    require_binary,
)
from paths import REPO

DASHBOARD = REPO / "config" / "grafana" / "statestore.json"
RULES = REPO / "config" / "prometheus" / "statestore-alerts.yml"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# A metric an expression asks for, and its label matchers: ours, and Prometheus's own ALERTS.
SELECTOR = re.compile(r"\b(statestore_[a-z_]+|ALERTS)\b(\{[^}]*\})?")
FILTER = 'database=~"$database"'
LABEL_VALUES = re.compile(r"label_values\((statestore_[a-z_]+), *database\)")
NOT_SHOWN = {"statestore_clean_batches", "statestore_stats_timestamp_seconds"}  # in the files, on no panel


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _targets() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(panel, target) for panel in _dashboard()["panels"] for target in panel["targets"]]


def _variable(name: str) -> dict[str, Any]:
    [variable] = [v for v in _dashboard()["templating"]["list"] if v["name"] == name]
    return variable


def _regex_value(value: str) -> str:
    """``value`` as Grafana puts a selected value of a multi-value variable into a Prometheus query: its
    regular-expression characters escaped, inside a PromQL string (so each backslash doubled)."""
    return "".join("\\\\\\\\" if ch == "\\" else "\\\\" + ch if ch in "$^*{}[]'+?.()|" else ch for ch in value)


def _promql(expr: str, database: str) -> str:
    """``expr`` as Grafana sends it with ``$database`` = ``database`` (a regular expression)."""
    done = expr.replace("$database", database)
    assert "$" not in done, f"a variable the test does not know: {expr}"
    return done


def test_the_dashboard_is_grafana_json_with_a_data_source_and_a_database_variable():
    board = _dashboard()
    assert board["schemaVersion"] == 38  # Grafana 10.0's; Grafana 10.x and 11 migrate it on load
    assert board["uid"] == "statestore" and board["title"] and board["id"] is None
    source = _variable("datasource")
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    database = _variable("database")
    assert database["type"] == "query" and database["datasource"] == DATASOURCE
    assert LABEL_VALUES.fullmatch(database["query"]["query"]) and database["definition"] == database["query"]["query"]
    assert (database["multi"], database["includeAll"], database["allValue"]) == (True, True, ".*")

    panels = board["panels"]
    assert 6 <= len(panels) <= 12  # what an on-call engineer opens: few panels
    assert len({panel["id"] for panel in panels}) == len(panels)
    required = {item["id"] for item in board["__requires"] if item["type"] == "panel"}
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        where = panel["title"]
        assert panel["type"] in required and panel["title"] and panel["description"], where
        assert panel["datasource"] == DATASOURCE, where
        assert [t["refId"] for t in panel["targets"]] == [chr(ord("A") + i) for i in range(len(panel["targets"]))]
        assert all(t["datasource"] == DATASOURCE and t["expr"].strip() for t in panel["targets"]), where
        box = panel["gridPos"]
        assert box["x"] >= 0 and box["w"] > 0 and box["x"] + box["w"] <= 24 and box["h"] > 0, where
        mine = {(x, y) for x in range(box["x"], box["x"] + box["w"]) for y in range(box["y"], box["y"] + box["h"])}
        assert not mine & cells, f"{where} overlaps another panel"
        cells |= mine
    assert list(_data_sources(board)) and all(source == DATASOURCE for source in _data_sources(board))


def _data_sources(node: Any) -> Any:
    """Every data source the dashboard names, anywhere: none may be a fixed one of some Grafana."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource" and isinstance(value, dict):
                yield value
            else:
                yield from _data_sources(value)
    elif isinstance(node, list):
        for item in node:
            yield from _data_sources(item)


def test_every_expression_is_valid_promql(tmp_path: Path):
    """Each one as a recording rule, with ``$database`` as the All value and as one escaped database."""
    promtool = require_binary(PROMTOOL, "prometheus")
    exprs = [target["expr"] for _panel, target in _targets()]
    rules = [
        {"record": f"statestore:dashboard:{n}", "expr": _promql(expr, database)}
        for n, (expr, database) in enumerate((e, d) for e in exprs for d in (".*", _regex_value("127.0.0.1:5432/x")))
    ]
    variable = LABEL_VALUES.fullmatch(_variable("database")["query"]["query"])
    assert variable
    rules.append({"record": "statestore:dashboard:variable", "expr": variable.group(1)})
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


def test_every_metric_the_dashboard_asks_for_is_one_a_real_clean_and_stats_write(tmp_path: Path):
    url, _runs = airflow34_store(tmp_path / "airflow.db")  # Airflow 3.4: every family, by store too
    clean, stats = tmp_path / "clean.prom", tmp_path / "stats.prom"
    for args in (("stats", "--metrics-file", str(stats)), ("clean", "--metrics-file", str(clean))):
        result = run_cli(*args, conn=url)
        assert result.exit_code == 0, result.output
    text = clean.read_text(encoding="utf-8") + stats.read_text(encoding="utf-8")
    written = set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))
    exprs = [target["expr"] for _panel, target in _targets()] + [_variable("database")["query"]["query"]]
    asked = {name for expr in exprs for name, _labels in SELECTOR.findall(expr)}
    assert "ALERTS" in asked  # Prometheus's series of the alert rules' states, not a file's
    assert asked - {"ALERTS"} == written - NOT_SHOWN
    alerts = [rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    [alert_filter] = {m for expr in exprs for m in re.findall(r'alertname=~"([^"]+)"', expr)}
    assert alerts and all(re.fullmatch(alert_filter, alert) for alert in alerts)


def test_every_panel_filters_by_the_database_variable():
    for panel, target in _targets():
        selectors = SELECTOR.findall(target["expr"])
        assert selectors, (panel["title"], target["expr"])
        for name, labels in selectors:
            assert FILTER in labels, f"{panel['title']}: {name}{labels} does not filter by $database"


def _wait_for_data(server: Server, monitored: list[Monitored]) -> None:
    """Until Prometheus holds two scrapes of every database's files and has evaluated the alert rules on them."""
    with_stats = sum(1 for db in monitored if len(db.files) == 2)
    ready = [
        f"count(count_over_time(statestore_clean_exit_status[1m]) >= 2) == {len(monitored)}",
        f"count(count_over_time(statestore_stats_timestamp_seconds[1m]) >= 2) == {with_stats}",
        'ALERTS{alertname="StatestoreCleanFailed", database="reporting.db"}',
    ]
    deadline = time.monotonic() + 60
    while not all(query(server, expr) for expr in ready):
        assert time.monotonic() < deadline, f"Prometheus has no data after 60 s:\n{server.log()[-3000:]}"
        time.sleep(0.5)


@pytest.mark.slow
def test_every_query_of_every_panel_shows_data_from_prometheus_scraping_node_exporter(textfile_exporter, tmp_path):
    require_binary(PROMETHEUS, "prometheus")  # before the databases are made
    folder = tmp_path / "prometheus"
    folder.mkdir()
    with (
        monitored_databases(tmp_path / "textfile", tmp_path) as monitored,
        prometheus(folder, textfile_exporter, [RULES]) as server,
    ):
        databases = sorted(db.database for db in monitored)
        _wait_for_data(server, monitored)
        metric = LABEL_VALUES.fullmatch(_variable("database")["query"]["query"])
        assert metric
        values = json.loads(http_get(server.url("/api/v1/label/database/values"), **{"match[]": metric.group(1)}))
        assert values["data"] == databases  # the variable offers every database

        at = time.time()  # every query at one moment: time() and the series' values are the same in each
        for panel, target in _targets():
            where = f"{panel['title']} {target['refId']}: {target['expr']}"
            every = query(server, _promql(target["expr"], _variable("database")["allValue"]), at)
            assert every, f"{where}: no data"
            shown = {}
            for database in databases:
                for series in query(server, _promql(target["expr"], _regex_value(database)), at):
                    assert series["metric"].get("database") == database, (where, database, series)
                    shown[json.dumps(series["metric"], sort_keys=True)] = series["value"][1]
            assert {json.dumps(s["metric"], sort_keys=True): s["value"][1] for s in every} == shown, where

        by_panel = {panel["title"]: panel["targets"] for panel in _dashboard()["panels"]}
        [exit_status] = by_panel["Last clean"]
        got = query(server, _promql(exit_status["expr"], ".*"))
        assert {s["metric"]["database"]: s["value"][1] for s in got} == {
            db.database: str(db.clean_exit) for db in monitored
        }
        [alerts] = by_panel["Alerts"]
        alerting = {  # pending or firing
            (s["metric"]["alertname"], s["metric"]["database"]) for s in query(server, _promql(alerts["expr"], ".*"))
        }
        assert ("StatestoreCleanFailed", "reporting.db") in alerting
        assert {("StatestoreExpiredKeysOld", db.database) for db in monitored if db.deleted is not None} <= alerting
        log = server.log()
    assert "level=error" not in log, log[-3000:]
