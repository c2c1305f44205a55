"""The "Bad input" table of docs/errors.md as data: each row an input, the one-line message and exit code it
gets, on which engines; and the store every case runs against. ``test_bad_input`` runs the rows,
``test_terminal_errors`` shows some of them on a terminal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from statestore_cli import AssetScope, MetastoreBackend, TaskScope
from statestore_cli.backends.store import Store
from statestore_cli.config import load_settings
from statestore_cli.db.database import make_engine
from statestore_cli.ops.commands import db_init

TASK = ("--dag-id", "d", "--run-id", "r", "--task-id", "t")
INT_RANGE = "a whole number from 0 to 2147483647"
ALL = ("sqlite", "postgresql", "mariadb")


class Case(NamedTuple):
    id: str
    readme: str  # the input, as the table in docs/errors.md names it
    args: tuple[str, ...]
    code: int
    message: str  # the whole line after "statestore: error: " (or "warning: "); {url} {cfg} {home} filled in
    env: dict[str, str] | None = None
    cfg: str | bytes | None = None  # written to {cfg} and passed with --config
    engines: tuple[str, ...] = ("sqlite",)
    conn: str | None = None  # instead of the test's store
    warning: bool = False  # a warning and the command goes on


CASES = [
    # -- configuration ---------------------------------------------------------------------------------
    Case(
        "int-wrong-type",
        "an integer option that is not a number (`AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE=ten`)",
        ("clean",),
        2,
        "environment variable AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE: invalid value 'ten' for "
        f"[state_store] state_cleanup_batch_size: expected {INT_RANGE}",
        env={"AIRFLOW__STATE_STORE__STATE_CLEANUP_BATCH_SIZE": "ten"},
    ),
    Case(
        "int-out-of-range",
        "an integer option out of range (`default_retention_days = -1`)",
        ("set", *TASK, "k", "1"),
        2,
        f"{{cfg}}: invalid value '-1' for [state_store] default_retention_days: expected {INT_RANGE}",
        cfg="[state_store]\ndefault_retention_days = -1\n",
    ),
    Case(
        "int-too-big",
        "an integer option beyond a database INTEGER (`max_value_storage_bytes = 2147483648`)",
        ("set", *TASK, "k", "1"),
        2,
        f"{{cfg}}: invalid value '2147483648' for [state_store] max_value_storage_bytes: expected {INT_RANGE}",
        cfg="[state_store]\nmax_value_storage_bytes = 2147483648\n",
    ),
    Case(
        "bool-wrong",
        "a boolean option that is not one (`clear_on_success = maybe`)",
        ("set", *TASK, "k", "1"),
        2,
        "{cfg}: invalid value 'maybe' for [state_store] clear_on_success: "
        "expected a boolean (true/false, yes/no, on/off, 1/0)",
        cfg="[state_store]\nclear_on_success = maybe\n",
    ),
    Case(
        "class-not-dotted",
        "a backend that is not a dotted path (`backend = my backend`)",
        ("set", *TASK, "k", "1"),
        2,
        "{cfg}: invalid value 'my backend' for [state_store] backend: "
        "expected a dotted path such as mypackage.module.ClassName",
        cfg="[state_store]\nbackend = my backend\n",
    ),
    Case(
        "class-missing-module",
        "a backend whose module does not exist (`backend = nosuch.module.Backend`)",
        ("set", *TASK, "k", "1"),
        2,
        "{cfg}: [state_store] backend = 'nosuch.module.Backend': cannot import module 'nosuch.module' "
        "(ModuleNotFoundError: No module named 'nosuch')",
        cfg="[state_store]\nbackend = nosuch.module.Backend\n",
    ),
    Case(
        "duration-option",
        "a connect timeout that is not a duration (`--connect-timeout soon`, `connect_timeout = 0s`)",
        ("--connect-timeout", "soon", "list"),
        2,
        "--connect-timeout: invalid value 'soon' for [state_store] connect_timeout: "
        "expected a positive duration such as 10s, 2m or PT30S",
    ),
    Case(
        "duration-option-zero",
        "a connect timeout that is not a duration (`--connect-timeout soon`, `connect_timeout = 0s`)",
        ("list",),
        2,
        "{cfg}: invalid value '0s' for [state_store] connect_timeout: "
        "expected a positive duration such as 10s, 2m or PT30S",
        cfg="[state_store]\nconnect_timeout = 0s\n",
    ),
    Case(
        "lock-timeout-option",
        "a lock timeout that is not a positive duration (`--lock-timeout soon`, `lock_timeout = 0`)",
        ("set", *TASK, "k", '"new"', "--lock-timeout", "soon"),
        2,
        "--lock-timeout: invalid value 'soon' for [state_store] lock_timeout: "
        "expected a positive duration such as 10s, 2m or PT30S",
        engines=ALL,
    ),
    Case(
        "lock-timeout-option-zero",
        "a lock timeout that is not a positive duration (`--lock-timeout soon`, `lock_timeout = 0`)",
        ("clean",),
        2,
        "environment variable AIRFLOW__STATE_STORE__LOCK_TIMEOUT: invalid value '0' for [state_store] lock_timeout: "
        "expected a positive duration such as 10s, 2m or PT30S",
        env={"AIRFLOW__STATE_STORE__LOCK_TIMEOUT": "0"},
    ),
    Case(
        "unknown-state-store-option",
        "an unknown option in `[state_store]` (`state_cleanup_batch_sise = 5`)",
        ("list",),
        0,
        "{cfg}: unknown option [state_store] state_cleanup_batch_sise is ignored; "
        "did you mean state_cleanup_batch_size?",
        cfg="[state_store]\nstate_cleanup_batch_sise = 5\n",
        warning=True,
    ),
    Case(
        "unknown-state-store-env",
        "an unknown `AIRFLOW__STATE_STORE__*` variable (`..._DEFAULT_RETENTION_DAY=3`)",
        ("list",),
        0,
        "environment variable AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAY: unknown option [state_store] "
        "default_retention_day is ignored; did you mean default_retention_days?",
        env={"AIRFLOW__STATE_STORE__DEFAULT_RETENTION_DAY": "3"},
        warning=True,
    ),
    Case(
        "unknown-workers-option",
        "a near miss in `[workers]` (`state_store_backends = ...`; Airflow's own `[workers]` options pass)",
        ("list",),
        0,
        "{cfg}: unknown option [workers] state_store_backends is ignored; did you mean state_store_backend?",
        cfg="[workers]\nstate_store_backends = a.b.C\nmin_heartbeat_interval = 5\n",
        warning=True,
    ),
    Case(
        "config-unclosed-header",
        "a malformed config file (an unclosed `[section` header)",
        ("list",),
        2,
        "cannot read config file {cfg}: line 1 is an unclosed [section] header: '[state_store'",
        cfg="[state_store\ndefault_retention_days = 1\n",
    ),
    Case(
        "config-no-section",
        "a malformed config file (an option before any section)",
        ("list",),
        2,
        "cannot read config file {cfg}: line 1 comes before any [section] header: 'default_retention_days = 1'",
        cfg="default_retention_days = 1\n",
    ),
    Case(
        "config-not-utf8",
        "a config file that is not UTF-8",
        ("list",),
        2,
        "cannot read config file {cfg}: 'utf-8' codec can't decode byte 0xff in position 14: invalid start byte",
        cfg=b"[state_store]\n\xff\n",
    ),
    Case(
        "config-missing",
        "`--config` naming a file that does not exist",
        ("--config", "/nonexistent/airflow.cfg", "list"),
        2,
        "config file /nonexistent/airflow.cfg does not exist; pass an existing file to --config",
    ),
    Case(
        "config-directory",
        "`--config` naming a directory",
        ("--config", "/", "list"),
        2,
        "config file / is not a file; pass an airflow.cfg-style file to --config",
    ),
    Case(
        "airflow-config-missing",
        "`AIRFLOW_CONFIG` naming a file that does not exist",
        ("list",),
        0,
        "$AIRFLOW_CONFIG names /nonexistent/airflow.cfg, which does not exist (or is not a file): "
        "using the environment and the defaults; fix the path or unset AIRFLOW_CONFIG",
        env={"AIRFLOW_CONFIG": "/nonexistent/airflow.cfg"},
        warning=True,
    ),
    # -- the database URL ------------------------------------------------------------------------------
    Case(
        "url-unparsable",
        "a URL that does not parse (`AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=postgresql://u:pw@h:port/db`)",
        ("list",),
        2,
        "environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONN: invalid value 'postgresql://u:***@h:port/db' "
        "for [database] sql_alchemy_conn: expected a SQLAlchemy URL such as sqlite:////path/airflow.db",
        env={"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://u:s3cret@h:port/db"},
        conn="",
    ),
    Case(
        "conn-cmd-fails",
        "a `_cmd` command that fails (`AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD`, `[database] sql_alchemy_conn_cmd`)",
        ("set", *TASK, "k", '"new"'),
        3,
        "environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD: the command failed (exit status 2); its output "
        "is not shown, as it may hold a password: run the command yourself to see it",
        env={
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": "sh -c 'echo postgresql://u:s3cret@h/db; "
            "echo vault: permission denied for postgresql://u:s3cret@vault/ >&2; exit 2'"
        },
        conn="",
    ),
    Case(
        "conn-cmd-empty",
        "a `_cmd` command that prints nothing",
        ("set", *TASK, "k", '"new"'),
        2,
        "environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD: the command printed nothing; it must print "
        "the value on stdout",
        env={"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": "true"},
        conn="",
    ),
    Case(
        "conn-cmd-timeout",
        "a `_cmd` command still running after `[state_store] command_timeout` (default 30s)",
        ("set", *TASK, "k", '"new"'),
        3,
        "environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD: the command did not finish within 1s and was "
        "stopped; raise [state_store] command_timeout or make the command answer sooner",
        env={"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD": "sleep 20", "AIRFLOW__STATE_STORE__COMMAND_TIMEOUT": "1s"},
        conn="",
    ),
    Case(
        "conn-secret-no-backend",
        "a `_secret` option without a `[secrets] backend`",
        ("set", *TASK, "k", '"new"'),
        2,
        "environment variable AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET: a _secret option needs [secrets] backend "
        "(AIRFLOW__SECRETS__BACKEND), the secrets backend class to read it from; set it, or give the option "
        "another way",
        env={"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_SECRET": "sql_alchemy_conn"},
        conn="",
    ),
    Case(
        "engine-args-not-json",
        "`sql_alchemy_engine_args` that is not a JSON object (`{not json`)",
        ("set", *TASK, "k", '"new"'),
        2,
        "{cfg}: invalid value for [database] sql_alchemy_engine_args: expected a JSON object such as "
        '{{"pool_size": 5}} (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)) '
        "(the value is not shown: it may hold a password)",
        cfg="[database]\nsql_alchemy_engine_args = {not json\n",
    ),
    Case(
        "engine-args-refused",
        'an argument `create_engine` refuses (`sql_alchemy_engine_args = {"pool_sise": 5}`)',
        ("set", *TASK, "k", '"new"'),
        2,
        "[database] sql_alchemy_engine_args: create_engine refused them: Invalid argument(s) 'pool_sise' sent to "
        "create_engine(), using configuration SQLiteDialect_pysqlite/QueuePool/Engine.  Please check that the "
        "keyword arguments are appropriate for this combination of components.",
        cfg='[database]\nsql_alchemy_engine_args = {"pool_sise": 5}\n',
    ),
    Case(
        "connect-args-missing",
        "`sql_alchemy_connect_args` naming a module that does not exist",
        ("set", *TASK, "k", '"new"'),
        2,
        "{cfg}: [database] sql_alchemy_connect_args = 'nosuch_settings.connect_args': cannot import module "
        "'nosuch_settings' (ModuleNotFoundError: No module named 'nosuch_settings')",
        cfg="[database]\nsql_alchemy_connect_args = nosuch_settings.connect_args\n",
    ),
    Case(
        "schema-on-sqlite",
        "`sql_alchemy_schema` on SQLite",
        ("set", *TASK, "k", '"new"'),
        2,
        "[database] sql_alchemy_schema = 'airflow' is set, but SQLite has no schemas (Airflow cannot use one there "
        "either): unset it",
        env={"AIRFLOW__DATABASE__SQL_ALCHEMY_SCHEMA": "airflow"},
    ),
    Case(
        "url-unknown-dialect",
        "a URL with an unknown dialect (`oracle://...`)",
        ("list",),
        2,
        "unsupported database 'oracle' in [database] sql_alchemy_conn: use sqlite://, postgresql:// or mysql://",
        conn="oracle://u:s3cret@h/db",
    ),
    Case(
        "url-missing-driver",
        "a URL whose driver is not installed (`mysql+mysqlconnector://...`)",
        ("list",),
        2,
        "the database driver for 'mysql+mysqlconnector' is not installed (mysql); "
        "install it, or use mysql+pymysql:// after installing PyMySQL (pip install 'PyMySQL'), "
        "or reinstall statestore with its mysql extra (pip install '.[mysql]' in its source tree)",
        conn="mysql+mysqlconnector://root:s3cret@127.0.0.1/test",
    ),
    Case(
        "url-wrong-password",
        "a wrong password",
        ("list",),
        3,
        "database error on mysql+pymysql://root:***@127.0.0.1:3306/test: "
        "(1045, \"Access denied for user 'root'@'127.0.0.1' (using password: YES)\")",
        conn="mysql+pymysql://root:s3cret@127.0.0.1:3306/test",
        engines=("mariadb",),
    ),
    Case(
        "url-unreachable",
        "an unreachable host (nothing listens on the port)",
        ("list",),
        3,
        "database error on postgresql+psycopg://u:***@127.0.0.1:9/db: connection failed: "
        'connection to server at "127.0.0.1", port 9 failed: Connection refused',
        conn="postgresql+psycopg://u:s3cret@127.0.0.1:9/db",
    ),
    Case(
        "url-missing-database",
        "a database that does not exist on the server",
        ("list",),
        3,
        "database error on postgresql+psycopg://postgres@127.0.0.1:5432/no_such_db_here: connection failed: "
        'connection to server at "127.0.0.1", port 5432 failed: FATAL:  database "no_such_db_here" does not exist',
        conn="postgresql+psycopg://postgres@127.0.0.1:5432/no_such_db_here",
        engines=("postgresql",),
    ),
    Case(
        "sqlite-missing-file",
        "a SQLite file that does not exist",
        ("list",),
        3,
        "no state store at {home}/missing.db: the file does not exist; the URL is the one --conn gave; if the "
        "store is elsewhere, fix --conn; to create it here, run "
        "`statestore --conn sqlite:///{home}/missing.db db init`",
        conn="sqlite:///{home}/missing.db",
    ),
    Case(
        "no-schema",
        "a database without the state store tables",
        ("list",),
        3,
        "the state store tables are missing in {bare}; the URL is the one --conn gave; if the store is "
        "elsewhere, fix --conn; to create them here, run `statestore --conn {bare_conn} db init`",
        conn="{bare}",
        engines=ALL,
    ),
    # -- values, keys and scopes -----------------------------------------------------------------------
    Case(
        "json-invalid",
        "a VALUE that is not JSON (`{bad`)",
        ("set", *TASK, "k", "{bad"),
        2,
        "VALUE is not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2); "
        "quote it as JSON or pass --string to store it as a string",
        engines=ALL,
    ),
    Case(
        "json-null",
        "a VALUE of JSON `null`",
        ("set", *TASK, "k", "null"),
        2,
        "VALUE is JSON null, which cannot be stored; delete the key instead",
        engines=ALL,
    ),
    Case(
        "json-too-deep",
        "a VALUE nested more than 512 levels deep (`[[[[…`, 50,000 deep)",
        ("set", *TASK, "k", "[" * 50_000),
        2,
        "VALUE nests arrays or objects more than 512 levels deep; store a flatter value",
    ),
    Case(
        "value-too-big",
        "a VALUE over `max_value_storage_bytes`",
        ("set", *TASK, "k", '"0123456789"'),
        2,
        "value of key 'k' is 12 bytes, over [state_store] max_value_storage_bytes = 10; "
        "raise the limit or store a smaller value",
        env={"AIRFLOW__STATE_STORE__MAX_VALUE_STORAGE_BYTES": "10"},
        engines=ALL,
    ),
    Case(
        "key-empty", "an empty KEY", ("set", *TASK, "", "1"), 2, "key must be a non-empty string, got ''", engines=ALL
    ),
    Case(
        "key-too-long",
        "a KEY over 512 characters",
        ("set", *TASK, "k" * 513, "1"),
        2,
        "key is 513 characters long; the limit is 512",
        engines=ALL,
    ),
    Case(
        "key-not-utf8",
        "a KEY (or id, or asset name) that is not valid UTF-8",
        ("set", *TASK, "k\udcff", "1"),
        2,
        "key is not valid UTF-8 (byte 0xff at character 2); pass it as UTF-8 text",
        engines=ALL,
    ),
    Case(
        "id-not-utf8",
        "a KEY (or id, or asset name) that is not valid UTF-8",
        ("set", "--dag-id", "d\udcc3", "--run-id", "r", "--task-id", "t", "k", "1"),
        2,
        "dag_id is not valid UTF-8 (byte 0xc3 at character 2); pass it as UTF-8 text",
    ),
    Case(
        "asset-name-not-latin1",
        "an asset name outside latin1 on MySQL/MariaDB (Airflow's schema stores them as latin1 there)",
        ("set", "--asset-name", "ключ", "k", "1"),
        2,
        "asset name 'ключ' holds 'к', outside latin1: MySQL and MariaDB store asset names and uris as latin1, "
        "as Airflow's schema does there",
        engines=("mariadb",),
    ),
    Case(
        "asset-filter-not-latin1",
        "an asset filter outside latin1 on MySQL/MariaDB (no asset there can have it)",
        ("list", "--asset-uri", "s3://b/注文"),
        2,
        "asset uri 's3://b/注文' holds '注', outside latin1: MySQL and MariaDB store asset names and uris as latin1, "
        "as Airflow's schema does there",
        engines=("mariadb",),
    ),
    Case(
        "key-trailing-space-twin",
        "a KEY differing from a stored key only in trailing spaces, on MySQL/MariaDB (`set ... 'k '` beside `k`)",
        ("set", *TASK, "k ", "1"),
        2,
        "cannot write key 'k ' for dag_id=d run_id=r task_id=t map_index=-1: key 'k ' and the stored key 'k' differ "
        "only in trailing spaces (MySQL/MariaDB unique indexes ignore trailing spaces), so they cannot be stored apart",
        engines=("mariadb",),
    ),
    Case(
        "map-index-not-int",
        "a map index that is not an integer",
        ("set", *TASK, "--map-index", "x", "k", "1"),
        2,
        "Invalid value for '--map-index': 'x' is not a valid int. (see 'statestore set --help')",
        engines=ALL,
    ),
    Case(
        "map-index-negative",
        "a map index below -1",
        ("set", *TASK, "--map-index", "-2", "k", "1"),
        2,
        "map_index must be -1 (not mapped) or >= 0, got -2",
    ),
    Case(
        "both-scopes",
        "both a task and an asset scope",
        ("set", *TASK, "--asset-name", "a", "k", "1"),
        2,
        "a task scope and an asset scope were both given; give --dag-id, --run-id and --task-id "
        "(and --map-index) for a task, --dag-id and --run-id alone for a dag run's keys (Airflow 3.4), or "
        "--asset-name, --asset-uri or --asset-id for an asset",
        engines=ALL,
    ),
    Case(
        "no-scope",
        "neither a task nor an asset scope",
        ("set", "k", "1"),
        2,
        "no scope given: give --dag-id, --run-id and --task-id (and --map-index) for a task, "
        "--dag-id and --run-id alone for a dag run's keys (Airflow 3.4), or --asset-name, --asset-uri or "
        "--asset-id for an asset",
        engines=ALL,
    ),
    Case(
        "retention-bad",
        "a duration that does not parse (`--retention 5x`)",
        ("set", *TASK, "k", "1", "--retention", "5x"),
        2,
        "invalid retention '5x': use 'never', a duration such as 90s, 15m, 6h, 7d or 1d12h, "
        "or ISO 8601 such as P7D or PT6H",
        engines=ALL,
    ),
    Case(
        "retention-zero",
        "a retention of zero (`--retention 0s`)",
        ("set", *TASK, "k", "1", "--retention", "0s"),
        2,
        "retention '0s' must be positive; use 'never' for a key that never expires",
    ),
    Case(
        "clean-duration-bad",
        "a clean duration that does not parse (`--max-runtime`, `--older-than`, `--statement-timeout`)",
        ("clean", "--max-runtime", "soon"),
        2,
        "invalid --max-runtime 'soon': use a duration such as 30s, 5m or 1h",
        engines=ALL,
    ),
    Case(
        "older-than-bad",
        "a clean duration that does not parse (`--max-runtime`, `--older-than`, `--statement-timeout`)",
        ("clean", "--older-than", "soon"),
        2,
        "invalid --older-than 'soon': use a duration such as 30s, 5m or 1h",
    ),
    Case(
        "metrics-label-bad",
        "a metrics label that is not a label name or NAME=VALUE (`--metrics-label 1region=eu`)",
        ("clean", "--metrics-file", "statestore.prom", "--metrics-label", "1region=eu"),
        2,
        "--metrics-label '1region=eu' has a bad label name '1region': letters, digits and _, not starting with a digit",
    ),
    Case(
        "metrics-label-not-utf8",
        "a metrics label value that is not UTF-8 (a byte such as 0xff on the command line)",
        ("clean", "--metrics-file", "statestore.prom", "--metrics-label", "region=eu\udcff"),
        2,
        "--metrics-label 'region=eu\\udcff' has a value that is not valid UTF-8; pass it as UTF-8 text",
        engines=ALL,
    ),
    Case(
        "expires-at-out-of-range",
        "an instant outside the years 1 to 9999 in UTC (`set --expires-at 0001-01-01T00:00:00+14:00 --force`)",
        ("set", *TASK, "k", "1", "--expires-at", "0001-01-01T00:00:00+14:00", "--force"),
        2,
        "--expires-at '0001-01-01T00:00:00+14:00' is outside the years 1 to 9999 in UTC; give an instant within them",
        engines=ALL,
    ),
    Case(
        "expires-at-out-of-range-late",
        "an instant past the year 9999 in UTC (`set --expires-at 9999-12-31T23:59:59-14:00`)",
        ("set", *TASK, "k", "1", "--expires-at", "9999-12-31T23:59:59-14:00"),
        2,
        "--expires-at '9999-12-31T23:59:59-14:00' is outside the years 1 to 9999 in UTC; give an instant within them",
    ),
    Case(
        "retention-too-long",
        "a retention past the year 9999 (`--retention 999999999d`)",
        ("set", *TASK, "k", "1", "--retention", "999999999d"),
        2,
        "a retention of 999999999d reaches past the year 9999; give a shorter one, or 'never' (NEVER_EXPIRE) "
        "for a key that never expires",
    ),
    Case(
        "older-than-too-long",
        "an age before the year 1 (`clean --older-than 999999999d`, `state_cleanup_older_than`)",
        ("clean", "--older-than", "999999999d"),
        2,
        "an age of 999999999d reaches back before the year 1",
        engines=ALL,
    ),
    Case(
        "statement-timeout-too-long",
        "a statement timeout longer than PostgreSQL takes (`clean --statement-timeout 99999999d`)",
        ("clean", "--statement-timeout", "99999999d"),
        2,
        "--statement-timeout '99999999d' is too long; the longest is 2147483s (about 24 days)",
        engines=ALL,
    ),
    Case(
        "older-than-option",
        "a duration option that does not parse (`state_cleanup_older_than = -1d`)",
        ("clean",),
        2,
        "{cfg}: invalid value '-1d' for [state_store] state_cleanup_older_than: "
        "expected 0 or a duration such as 12h, 2d, 1d12h or P1D",
        cfg="[state_store]\nstate_cleanup_older_than = -1d\n",
    ),
    Case(
        "batch-negative",
        "a negative batch size (`--batch-size -1`)",
        ("clean", "--batch-size", "-1"),
        2,
        "Invalid value for '--batch-size': -1 is not in the range x>=0. (see 'statestore clean --help')",
        engines=ALL,
    ),
    Case(
        "batch-not-number",
        "a batch size that is not a number (`--batch-size ten`)",
        ("clean", "--batch-size", "ten"),
        2,
        "Invalid value for '--batch-size': 'ten' is not a valid int range. (see 'statestore clean --help')",
    ),
    Case(
        "batch-too-big",
        "a batch size over 2147483647",
        ("clean", "--batch-size", "2147483648"),
        2,
        "--batch-size 2147483648 is too large; the largest is 2147483647",
    ),
    Case(
        "largest-zero",
        "no values to list (`stats --largest 0`)",
        ("stats", "--largest", "0"),
        2,
        "--largest 0 is out of range: give a number from 1 to 1000",
    ),
    Case(
        "largest-too-many",
        "more largest values than a report lists (`stats --largest 1001`)",
        ("stats", "--largest", "1001"),
        2,
        "--largest 1001 is out of range: give a number from 1 to 1000",
        engines=ALL,
    ),
    Case(
        "clear-unconfirmed",
        "`clear` without `--yes` where nobody can confirm",
        ("clear", *TASK),
        2,
        "clear deletes keys and stdin is not a terminal to confirm on; pass --yes",
        engines=ALL,
    ),
    Case(
        "copy-no-target",
        "`copy` without a `--to-*` option",
        ("copy", *TASK),
        2,
        "no target given: give --to-dag-id, --to-run-id, --to-task-id or --to-map-index",
    ),
    Case(
        "copy-onto-itself",
        "`copy` to the scope it copies from",
        ("copy", *TASK, "--to-task-id", "t"),
        2,
        "the target is the source (dag_id=d run_id=r task_id=t map_index=-1); give a --to-* option that differs",
    ),
    Case(
        "copy-other-kind",
        "`copy` of a task's keys to an asset (`--to-asset-name`)",
        ("copy", *TASK, "--to-asset-name", "b"),
        2,
        "a task's keys are copied to another scope of the same kind; give --to-dag-id, --to-run-id, --to-task-id "
        "or --to-map-index",
    ),
    Case(
        "copy-clash",
        "`copy` onto keys the target holds, without `--overwrite`",
        ("copy", *TASK, "--to-task-id", "u"),
        2,
        "dag_id=d run_id=r task_id=u map_index=-1 already has 1 of the keys ('k'); nothing copied: pass --overwrite "
        "to replace them",
        engines=ALL,
    ),
    Case(
        "copy-target-missing",
        "`copy` to an asset, dag run or task instance that does not exist (`--to-asset-id 999`; on an Airflow "
        "database any target Airflow has not created)",
        ("copy", "--asset-name", "a", "--to-asset-id", "999"),
        2,
        "nothing to copy to: no asset with asset_id=999 in this database: copy to one that exists",
        engines=ALL,
    ),
    Case(
        "copy-move-unconfirmed",
        "`copy --move` (or `--overwrite` onto existing keys) without `--yes` where nobody can confirm",
        ("copy", *TASK, "--to-task-id", "v", "--move"),
        2,
        "--move deletes the source keys and stdin is not a terminal to confirm on; pass --yes",
        engines=ALL,
    ),
    Case(
        "orphans-all-unreferenced-alone",
        "`--all-unreferenced` without `--delete`",
        ("orphans", "--all-unreferenced"),
        2,
        "--all-unreferenced applies to --delete; without it nothing is deleted",
    ),
    # -- --backup FILE (clean, clear, assets sweep) -----------------------------------------------------------
    Case(
        "backup-exists",
        "`--backup FILE` naming a file that exists and is not empty",
        ("clean", "--backup", "{cfg}"),
        2,
        "--backup {cfg}: already exists and is not empty (14 bytes); a backup never overwrites or appends to a "
        "file: give a new path",
        cfg="[state_store]\n",
        engines=ALL,
    ),
    Case(
        "backup-no-folder",
        "`--backup FILE` in a folder that does not exist",
        ("clear", "--dag-id", "d", "--yes", "--backup", "/nonexistent/clear.jsonl"),
        2,
        "--backup /nonexistent/clear.jsonl: the directory /nonexistent does not exist; create it or give another path",
        engines=ALL,
    ),
    Case(
        "backup-directory",
        "`--backup FILE` naming a directory",
        ("assets", "sweep", "--yes", "--backup", "{home}"),
        2,
        "--backup {home}: is a directory; give the path of a new file in it",
    ),
    Case(
        "backup-stdout",
        "`--backup -`",
        ("clean", "--backup", "-"),
        2,
        "--backup - would be stdout, which cannot be synced to disk before each commit; give a file path",
    ),
    Case(
        "diff-bad-line",
        "a `diff` FILE line that is not an export line (`diff backup.jsonl`)",
        ("diff", "{cfg}"),
        2,
        "{cfg} line 1: not valid JSON (Expecting value); no difference is shown for a file with a bad line",
        cfg="[state_store]\n",
    ),
    Case(
        "diff-directory",
        "a `diff` FILE that is a directory",
        ("diff", "{home}"),
        2,
        "cannot read {home}: Is a directory",
    ),
    Case(
        "backup-dry-run",
        "`--backup` with `--dry-run` (`clean`, `assets sweep`)",
        ("clean", "--dry-run", "--backup", "clean.jsonl"),
        2,
        "--backup FILE keeps what a clean deletes and a --dry-run deletes nothing; drop one of them",
    ),
]


def seed(url: str) -> None:
    db_init(Store.open(load_settings(conn_override=url), create_file=True))
    seed_keys(url)


def seed_keys(url: str) -> None:
    """``seed``'s keys, in a store whose tables are made."""
    backend = MetastoreBackend(make_engine(url))
    past = datetime.now(UTC) - timedelta(days=1)
    backend.set(TaskScope("d", "r", "t"), "k", '"old"')
    backend.set(TaskScope("d", "r", "t"), "expired", "1", expires_at=past)
    backend.set(AssetScope(name="a"), "k", '{"n": 1}')
    backend.set(TaskScope("d", "r", "u"), "k", '"new"')  # a key a copy from task t would land on
    backend.engine.dispose()
