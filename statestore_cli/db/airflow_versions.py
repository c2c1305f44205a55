"""Which Airflow release an Airflow metadata database's alembic revision belongs to.

Data only: the revision ids of Airflow's migrations from 3.0.0 to 3.3.2, oldest first, each under the
release that added it (3.3.1 and 3.3.2 added none: their databases are at 3.3.0's last revision), and
the last revision of each 2.x release. Under 3.4.0, not yet released: the migrations of Airflow's main
branch that change the state store (the dag-run store, regions, ``region_index``, the asset writer's
region), in the order they were found to run; a 3.4 database at another revision is read by its tables.
The state store tables came in revision ``fde9ed84d07b`` (Airflow 3.3.0); a database at an earlier
revision has no state store.
"""

from __future__ import annotations

from functools import cache

STATE_STORE_REVISION = "fde9ed84d07b"
STATE_STORE_SINCE = "3.3.0"

# Only the last revision of each 2.x release: a 2.x database is too old whatever its exact revision.
_AIRFLOW_2_HEADS = {
    "4bc4d934e2bc": "2.6.2",
    "405de8318b3a": "2.7.0",
    "10b52ebd31f7": "2.8.0",
    "88344c1d9134": "2.8.1",
    "1949afb29106": "2.9.0",
    "686269002441": "2.9.2",
    "22ed7efa9da2": "2.10.0",
    "5f2621c13b39": "2.10.3",
}

# "release: revisions in migration order", oldest release first.
_AIRFLOW_3_MIGRATIONS = """
3.0.0: 044f740568ec d0f1c55954fa 0bfc26bc256e a2c32e6c7729 1cdc775ca98f 522625f6d606 16cbcb1c8c36 44eabb1904b4
       0d9e73a75ee4 c3389cd7793f 5a5d66100783 fb2d4922cd79 3a8972ecb8f9 05234396c6fc d59cbbef95eb 486ac7936b78
       5f57a45b8433 d8cd3297971e d03e4a635aa3 2b47dc6bc8df 9fc3fc5de720 eed27faa34e3 e229247a6cb1 038dc8bc6284
       237cef8dfea1 5c9c0231baa2 38770795785f e39a26ac59f6 8ea135928435 33b04e4bfa19 6a9e7a527a88 e00344393f31
       7645189f3479 cf87489a35df 16f7f5ee874e d469d27e2a64 be2cc2f742cf ec62e120484d 0e9519b56710 959e216a3abb
       29ce7909c52b
3.0.3: fe199e1abd77
3.1.0: dfee8bd5d574 0242ac120002 3ac9e5732b1f 583e80dfcef4 66a7743fe20e ffdb0566c7c0 40f7c30a228b 09fa89ba1710
       f56f68b9e02f 3bda03debd04 808787349f22 a169942745c2 7582ea3f3dd5 a3c7f2b18d4e eaf332f43c7c cc92b33c6709
3.1.8: 82dbd68e6171 509b94a1042d
3.2.0: 15d84ca19038 ab6dc0c82d0e 1b2c3d4e5f6g 5cc8117e9285 69ddce9a7247 b87d2135fa50 e812941398f4 665854ef0536
       b12d4f98a91e edc4f85a4619 c47f2e1ab9d4 0b112f49112d e79fc784f145 55297ae24532 a5a3e5eb9b8d 53ff648b8a26
       f8c9d7e6b5a4 e42d9fcd10d9 134de42d3cb0 6222ce48e289 888b59e02a5b 1d6611b6ab7c
3.3.0: a4c2d171ae18 9fabad868fdb fde9ed84d07b b8f3e4a1d2c9 a7f3b2c1d4e5 a1b2c3d4e5f6 acc215baed80 8812eb67b63c
       a7e6d4c3b2f1 c9d4e5f6a7b8 c20871fbf23a dd5f3a8e2b91 9ff64e1c35d3 d2f4e1b3c5a7
3.4.0: 8a1d6c4f0b53 54a27b6f9d01 7f8c9a2d410e c3e7a9182f64 a5d7b9c13e40
"""


@cache
def _ordered() -> tuple[tuple[str, str], ...]:
    """(revision, release) of every Airflow 3 migration, in the order they run."""
    pairs: list[tuple[str, str]] = []
    release = ""
    for line in _AIRFLOW_3_MIGRATIONS.strip().splitlines():
        label, colon, revisions = line.partition(":")
        if colon:  # a new release; a line without one continues the release above
            release = label.strip()
        else:
            revisions = label
        pairs.extend((revision, release) for revision in revisions.split())
    return tuple(pairs)


def airflow_version(revision: str | None) -> str | None:
    """The Airflow release whose migration ``revision`` is (None: a revision this tool does not know)."""
    if revision is None:
        return None
    return dict(_ordered()).get(revision) or _AIRFLOW_2_HEADS.get(revision)


def has_state_store(revision: str | None) -> bool | None:
    """Whether a database at ``revision`` has the state store tables (None: unknown revision)."""
    order = [r for r, _ in _ordered()]
    if revision in _AIRFLOW_2_HEADS:
        return False
    if revision not in order:
        return None
    return order.index(revision) >= order.index(STATE_STORE_REVISION)
