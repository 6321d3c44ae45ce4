"""Database-level guard: nothing is physically deleted in normal operation.

Triggers make a raw `DELETE` on a memory, timeline, evidence or audit row fail, and make audit rows
immutable, so that neither a bug in Tideline nor a stray SQL statement can lose history. The owner's
"delete" is an audited expiry; a true erasure is a redaction in place.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from django.core.exceptions import ImproperlyConfigured

PROTECTED_TABLES = (
    "memory_narrativetag",
    "memory_memory",
    "memory_narrative",
    "memory_fact",
    "memory_selfconcept",
    "memory_contextturn",
    "memory_evidence",
    "memory_auditevent",
)
APPEND_ONLY_TABLES = ("memory_auditevent",)
DELETE_REFUSED = "Tideline never physically deletes history; expire the row instead"
UPDATE_REFUSED = "the audit log is append-only"


def guard_install_sql(
    vendor: str,
    *,
    protected: tuple[str, ...] = PROTECTED_TABLES,
    append_only: tuple[str, ...] = APPEND_ONLY_TABLES,
) -> list[str]:
    if vendor == "sqlite":
        statements = [
            f"CREATE TRIGGER IF NOT EXISTS {table}_no_delete BEFORE DELETE ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{DELETE_REFUSED}'); END"
            for table in protected
        ]
        statements += [
            f"CREATE TRIGGER IF NOT EXISTS {table}_no_update BEFORE UPDATE ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{UPDATE_REFUSED}'); END"
            for table in append_only
        ]
        return statements
    if vendor == "postgresql":
        statements = [
            "CREATE OR REPLACE FUNCTION tideline_refuse() RETURNS trigger AS $$ "
            "BEGIN RAISE EXCEPTION USING MESSAGE = TG_ARGV[0]; END; $$ LANGUAGE plpgsql"
        ]
        statements += [
            f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION tideline_refuse('{DELETE_REFUSED}')"
            for table in protected
        ]
        statements += [
            f"CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION tideline_refuse('{UPDATE_REFUSED}')"
            for table in append_only
        ]
        return statements
    raise ImproperlyConfigured(
        f"Tideline supports SQLite and PostgreSQL; no delete guard for database vendor {vendor!r}"
    )


def guard_remove_sql(
    vendor: str,
    *,
    protected: tuple[str, ...] = PROTECTED_TABLES,
    append_only: tuple[str, ...] = APPEND_ONLY_TABLES,
) -> list[str]:
    names = [f"{table}_no_delete" for table in protected]
    names += [f"{table}_no_update" for table in append_only]
    if vendor == "sqlite":
        return [f"DROP TRIGGER IF EXISTS {name}" for name in names]
    if vendor == "postgresql":
        tables = list(protected) + list(append_only)
        return [
            f"DROP TRIGGER IF EXISTS {name} ON {table}"
            for name, table in zip(names, tables, strict=True)
        ]
    raise ImproperlyConfigured(
        f"Tideline supports SQLite and PostgreSQL; no delete guard for database vendor {vendor!r}"
    )


@contextmanager
def triggers_kept(schema_editor, *, table: str) -> Iterator[None]:
    """Keep `table`'s triggers through a schema change that SQLite makes by rebuilding it.

    Most changes to a table on SQLite (a CHECK constraint, an altered column) copy it into a new
    table, drop the old one and rename the copy; the drop takes the table's triggers with it, this
    guard's and the search index's alike, and nothing would refuse a raw DELETE afterwards. Each is
    re-created from its own stored definition, in the order they were created. All of them, not
    only those found missing: `sqlmigrate` runs nothing, and the SQL it prints must keep them too.
    PostgreSQL alters a table in place."""
    if schema_editor.connection.vendor != "sqlite":
        yield
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s "
            "ORDER BY rowid",
            [table],
        )
        triggers = cursor.fetchall()
    yield
    for name, sql in triggers:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")
        # Without parameters, so the stored text runs verbatim (a "%" in it is no placeholder).
        schema_editor.execute(sql, None)
