"""Bulk export and import of both stores as JSON Lines: the names the CLI and tests use, from where they
live (``ops.exporting``, ``ops.importing``)."""

from statestore_cli.ops.exporting import (
    EXPORT_MODE,
    FETCH,
    ExportSummary,
    export_file,
    export_mode,
    export_records,
    write_export,
)
from statestore_cli.ops.import_summary import ImportSummary, StoreCounts
from statestore_cli.ops.importing import DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE, import_records

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "EXPORT_MODE",
    "FETCH",
    "MAX_BATCH_SIZE",
    "ExportSummary",
    "ImportSummary",
    "StoreCounts",
    "export_file",
    "export_mode",
    "export_records",
    "import_records",
    "write_export",
]
