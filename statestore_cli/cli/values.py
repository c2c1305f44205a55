"""Reading a VALUE argument: JSON unless ``--string``; ``-`` reads standard input."""

import json
import sys
from typing import Any

from statestore_cli.errors import InvalidInputError
from statestore_cli.model.json_depth import MAX_JSON_DEPTH, nests_deeper_than


def read_value(raw: str, *, as_string: bool) -> Any:
    text = sys.stdin.read() if raw == "-" else raw
    if raw == "-" and text.endswith("\n"):
        text = text[:-1]  # `echo` and here-docs add one; it is not part of the value
    if as_string:
        return text
    if nests_deeper_than(text, MAX_JSON_DEPTH):  # before json recurses once per level
        raise InvalidInputError(
            f"VALUE nests arrays or objects more than {MAX_JSON_DEPTH} levels deep; store a flatter value"
        )
    try:
        value = json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"VALUE is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            "quote it as JSON or pass --string to store it as a string"
        ) from None
    if value is None:
        raise InvalidInputError("VALUE is JSON null, which cannot be stored; delete the key instead")
    return value


def _not_json(name: str) -> None:
    # Python's json module reads NaN, Infinity and -Infinity; JSON itself (and Airflow's API) refuses them.
    raise InvalidInputError(
        f'VALUE contains {name}, which JSON does not allow; store a number, or a string such as "{name}"'
    )
