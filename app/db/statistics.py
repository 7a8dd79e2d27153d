"""The planner's statistics of the tables a worker's round trip reads, kept current while
they grow fast (PostgreSQL).

PostgreSQL plans a statement from its statistics of the tables, and a connection keeps the
plan of a statement it runs often (psycopg prepares it on its fifth run) until the tables
are analysed again. On a fresh database the round trip's statements are planned while its
tables are nearly empty: a scan of the whole table is then the best plan, and it stays the
plan while the table grows, until autovacuum analyses it, up to a minute later
(``autovacuum_naptime``). Measured on the throughput benchmark's fresh database, one worker:
the answer's statement read 3,500 buffers (1.3 ms) per run instead of about 100, counting
a repeat's candidates took 30 ms, and one round trip in 40 took 80-155 ms, growing with the
tables. So after a fill of the pool (one round trip in 32,
:func:`app.services.pool.fill_alone`) the app analyses those tables whose rows
changed more than they had rows when last analysed, as autovacuum would later on (it does
at a tenth): while a table grows its statistics are refreshed each time it doubles, and
once autovacuum keeps up this finds nothing to do. Analysing a table invalidates the plans
kept of it, in every connection.

An import or a bulk deletion changes a table at once, and the next statement may be a
researcher's export of the whole table: :func:`analyze_after_bulk` analyses what it changed
right after it commits. Without it, the CSV export of 200,000 imported triplets took 86.8 s
(68.5 s on a second project) where it took 4.2-15 s once analysed (issue 31), and
``bench/export_after_import.py`` measured 35.3 s against 7.1 s, and 76.2 s against 9.6 s on a
second project, whose rows the planner put at 1 though the table's count was right: the
statistics know each project's share of the table, and a new project has none until they
are made again. So an import of :data:`BULK_ROWS` rows or more is analysed whatever the
table's size; a deletion only once it changed a tenth of the table (autovacuum's own
threshold, reached a minute later).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

# The tables the worker's round trip searches (sessions and participants are read by key;
# a project's objects by index, which a plan made without statistics scanned them all for).
HOT_TABLES = ("questions", "queries", "answers", "objects")
MIN_CHANGED = 200  # rows changed since the last analysis before a small table is stale
LOCK_KEY = 0x7472_6970  # the advisory lock that lets one process analyse at a time

_STALE = text(
    """
    SELECT c.relname FROM pg_class AS c
    WHERE c.relnamespace = CAST(current_schema() AS regnamespace)
      AND c.relname = ANY(CAST(:tables AS TEXT[]))
      AND pg_stat_get_mod_since_analyze(c.oid) > GREATEST(c.reltuples, 0) + :least
    """
)
_ONE_AT_A_TIME = text("SELECT pg_try_advisory_xact_lock(:key)")


def stale_tables(db: Session) -> list[str]:
    """The hot tables whose rows changed more, since they were last analysed, than they
    had then (and at least :data:`MIN_CHANGED`)."""
    found = db.execute(_STALE, {"tables": list(HOT_TABLES), "least": MIN_CHANGED})
    return [name for (name,) in found]


def refresh_if_stale(db: Session) -> list[str]:
    """Analyse the stale hot tables (see the module), in a transaction of their own, which
    ``db`` must not have begun; the tables analysed. PostgreSQL only; nothing while another
    process analyses them, or if this user may not."""
    if db.get_bind().dialect.name != "postgresql":
        return []
    try:
        stale = stale_tables(db)
        if stale and db.execute(_ONE_AT_A_TIME, {"key": LOCK_KEY}).scalar_one():
            # Autovacuum may be analysing one of them: wait a moment at most, then skip.
            db.execute(text("SET LOCAL lock_timeout = '100ms'"))
            for table in stale:
                db.execute(text(f'ANALYZE "{table}"'))  # names from HOT_TABLES
        else:
            stale = []
        db.commit()
    except DBAPIError as error:  # a lock not had in time, or no right to analyse
        db.rollback()
        log.info("analysing the hot tables skipped: %s", error.orig)
        return []
    return stale


BULK_ROWS = 1_000  # rows one import or deletion changes in a table before it is analysed
BULK_FRACTION = 0.1  # of the rows the planner counted, that a deletion must change (autovacuum's)
_COUNTED = text(
    """
    SELECT c.relname, GREATEST(c.reltuples, 0) FROM pg_class AS c
    WHERE c.relnamespace = CAST(current_schema() AS regnamespace)
      AND c.relname = ANY(CAST(:tables AS TEXT[]))
    """
)


def analyze_after_bulk(
    db: Session, changed: Mapping[str, int], share: float = BULK_FRACTION
) -> list[str]:
    """After an import or a bulk deletion has committed: analyse each table of ``changed``
    (table name -> rows inserted or deleted) whose changed rows are at least
    :data:`BULK_ROWS` and more than ``share`` of the rows the planner counted in it (an
    import passes 0), in a transaction of its own (``db`` must not have begun one); the
    tables analysed. The counts come from the caller, not from PostgreSQL's activity statistics,
    which a backend sends at most once a second: the last chunks of an import may not be
    in them yet. PostgreSQL only; a table autovacuum is analysing at that moment is left to
    it."""
    if db.get_bind().dialect.name != "postgresql":
        return []
    wanted = {table: n for table, n in changed.items() if n >= BULK_ROWS}
    if not wanted:
        return []
    try:
        counted = {t: n for t, n in db.execute(_COUNTED, {"tables": list(wanted)})}
        stale = [t for t, n in wanted.items() if t in counted and n > share * counted[t]]
        if stale:
            db.execute(text("SET LOCAL lock_timeout = '1s'"))
            for table in stale:
                db.execute(text(f'ANALYZE "{table}"'))  # names of our own tables
        db.commit()
    except DBAPIError as error:  # a lock not had in time, or no right to analyse
        db.rollback()
        log.info("analysing %s after a bulk change skipped: %s", ", ".join(wanted), error.orig)
        return []
    return stale
