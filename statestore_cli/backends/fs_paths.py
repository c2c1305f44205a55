"""Where the filesystem backend keeps a value: a relative path built from the scope and key alone.

Every id and key becomes one path segment, percent-escaped so that nothing in it can act as a path:
``/``, ``\\``, NUL, ``%`` and every non-ASCII character are escaped, a leading ``.`` too (so no
segment is ``.``, ``..`` or hidden). Segments longer than ``SEGMENT_MAX`` characters (a 512-character
key, a 250-character run id of multi-byte characters) keep a readable head and end in ``~`` and a
hash of the whole text: file systems limit one name to 255 bytes. Plain segments never contain ``~``
(it is escaped too), so a hashed segment cannot equal a plain one. The same scope and key always give
the same path, and two different ones never do.
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote

from statestore_cli.errors import InvalidInputError
from statestore_cli.model.scopes import AssetScope, StoreScope, TaskScope

# Well under the 255-byte name limit of ext4, XFS, APFS and NTFS, leaving room for the ".json.gz"
# suffix and the ".<name>.tmp-<hex>" temporary file an atomic write goes through.
SEGMENT_MAX = 160
SUFFIXES = (".json", ".json.gz")
TEMP_MARK = ".tmp-"


def segment(text: str) -> str:
    """``text`` as one safe path segment (see the module docstring)."""
    escaped = quote(text, safe="", errors="surrogatepass").replace("~", "%7E")
    if escaped.startswith("."):
        escaped = "%2E" + escaped[1:]
    if len(escaped) <= SEGMENT_MAX:
        return escaped
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    head = escaped[: SEGMENT_MAX - len(digest) - 1]
    cut = head.rfind("%", len(head) - 2)
    return (head[:cut] if cut != -1 else head) + "~" + digest


def scope_dir(scope: StoreScope, *, all_map_indices: bool = False) -> str:
    """The folder holding a scope's keys (for a task: of its map index, or of all of them)."""
    if isinstance(scope, TaskScope):
        parts = ["task", segment(scope.dag_id), segment(scope.run_id)]
        if scope.region_id.int:  # two regions may hold the same task id and map index
            parts.append(f"region={scope.region_id}")
        parts.append(segment(scope.task_id))
        if not all_map_indices:
            parts.append(str(scope.map_index))
        return "/".join(parts)
    assert isinstance(scope, AssetScope)
    if scope.name:
        return f"asset/name/{segment(scope.name)}"
    if scope.uri:
        return f"asset/uri/{segment(scope.uri)}"
    return f"asset/id/{scope.asset_id}"


def value_path(scope: StoreScope, key: str, suffix: str = ".json") -> str:
    return f"{scope_dir(scope)}/{segment(key)}{suffix}"


def check_ref(ref: object) -> str:
    """``ref`` when it is a path this backend could have built, else ``InvalidInputError``: a
    reference read from the database must not name anything outside the root."""
    if not isinstance(ref, str) or not ref.startswith(("task/", "asset/")) or not ref.endswith(SUFFIXES):
        raise InvalidInputError(f"{ref!r} is not a filesystem backend reference (task/... or asset/..., .json)")
    for part in ref.split("/"):
        if not part or part.startswith(".") or "\\" in part or "\x00" in part or ":" in part:
            raise InvalidInputError(f"{ref!r} is not a filesystem backend reference (bad segment {part!r})")
    return ref
