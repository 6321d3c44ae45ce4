"""The persistent side of the search index: database objects kept in step with writes by triggers.

Per database vendor:

- SQLite (the embedded default): two FTS5 tables per kind of document — a word index over the
  segmented terms (`text_tokens`, computed by the `tideline_tokens` SQL function Tideline registers on
  every connection) and an external-content trigram index over the raw text for substring matches —
  plus the change log.
- PostgreSQL: the change log here; the database-native index (documents, BM25 statistics, pgvector
  and pg_trgm indexes, its pending queue) is memory/search/postgres.py's, installed by migration
  0011.

The change log (`tideline_search_change`) is one row per insert or relevant update of a memory or
turn, written by triggers in the writer's own transaction. Every process's in-memory index reads it
to refresh incrementally; the random `token` lets a reader notice that the log was rolled back and
reused (SQLite reuses AUTOINCREMENT values after a rollback).
"""

from django.core.exceptions import ImproperlyConfigured

CHANGE_TABLE = "tideline_search_change"
MEMORY_WORD = "memory_search_word"
MEMORY_TRIGRAM = "memory_search_trigram"
TURN_WORD = "turn_search_word"
TURN_TRIGRAM = "turn_search_trigram"
TOKENS_FUNCTION = "tideline_tokens"

# Columns whose change alters what search returns or how it ranks; activation counters are not here,
# so recalls never churn the index. `secret` decides who may find a memory (migration 0018 added
# it: a memory the owner made secret, or no longer secret, was seen so only after a restart).
MEMORY_WATCHED = (
    "scope_id, status, secret, valid_from, valid_to, pinned, importance, recorded_at, "
    "search_text, embedding, embedding_model, memory_type"
)
TURN_WATCHED = (
    "scope_id, session_id, seq, occurred_at, speaker, content, embedding, embedding_model"
)
TURN_TEXT = "coalesce({row}.speaker, '') || ' ' || {row}.content"


def _sqlite_install() -> list[str]:
    log = f"INSERT INTO {CHANGE_TABLE}(kind, row_id) VALUES"
    return [
        f"CREATE TABLE {CHANGE_TABLE} (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
        "kind TEXT NOT NULL, row_id INTEGER NOT NULL, token INTEGER NOT NULL DEFAULT (random()))",
        f"CREATE VIRTUAL TABLE {MEMORY_WORD} USING fts5(tokens, "
        "tokenize='unicode61 remove_diacritics 0')",
        f"CREATE VIRTUAL TABLE {MEMORY_TRIGRAM} USING fts5(search_text, "
        "content='memory_memory', content_rowid='id', tokenize='trigram')",
        f"CREATE VIRTUAL TABLE {TURN_WORD} USING fts5(tokens, "
        "tokenize='unicode61 remove_diacritics 0')",
        f"CREATE VIRTUAL TABLE {TURN_TRIGRAM} USING fts5(content, "
        "content='memory_contextturn', content_rowid='id', tokenize='trigram')",
        # Memories.
        "CREATE TRIGGER memory_search_ai AFTER INSERT ON memory_memory BEGIN "
        f"INSERT INTO {MEMORY_WORD}(rowid, tokens) "
        f"VALUES (new.id, {TOKENS_FUNCTION}(new.search_text)); "
        f"INSERT INTO {MEMORY_TRIGRAM}(rowid, search_text) VALUES (new.id, new.search_text); "
        f"{log} ('memory', new.id); END",
        "CREATE TRIGGER memory_search_au_text AFTER UPDATE OF search_text ON memory_memory "
        "WHEN old.search_text IS NOT new.search_text BEGIN "
        f"DELETE FROM {MEMORY_WORD} WHERE rowid = old.id; "
        f"INSERT INTO {MEMORY_WORD}(rowid, tokens) "
        f"VALUES (new.id, {TOKENS_FUNCTION}(new.search_text)); "
        f"INSERT INTO {MEMORY_TRIGRAM}({MEMORY_TRIGRAM}, rowid, search_text) "
        "VALUES ('delete', old.id, old.search_text); "
        f"INSERT INTO {MEMORY_TRIGRAM}(rowid, search_text) VALUES (new.id, new.search_text); "
        "END",
        memory_watch_trigger("sqlite", MEMORY_WATCHED),
        "CREATE TRIGGER memory_search_narrative_ai AFTER INSERT ON memory_narrative "
        f"BEGIN {log} ('memory', new.memory_ptr_id); END",
        "CREATE TRIGGER memory_search_narrative_au AFTER UPDATE OF weight, layer "
        f"ON memory_narrative BEGIN {log} ('memory', new.memory_ptr_id); END",
        # Turns.
        "CREATE TRIGGER turn_search_ai AFTER INSERT ON memory_contextturn BEGIN "
        f"INSERT INTO {TURN_WORD}(rowid, tokens) "
        f"VALUES (new.id, {TOKENS_FUNCTION}({TURN_TEXT.format(row='new')})); "
        f"INSERT INTO {TURN_TRIGRAM}(rowid, content) VALUES (new.id, new.content); "
        f"{log} ('turn', new.id); END",
        "CREATE TRIGGER turn_search_au_text AFTER UPDATE OF speaker, content ON memory_contextturn "
        "BEGIN "
        f"DELETE FROM {TURN_WORD} WHERE rowid = old.id; "
        f"INSERT INTO {TURN_WORD}(rowid, tokens) "
        f"VALUES (new.id, {TOKENS_FUNCTION}({TURN_TEXT.format(row='new')})); "
        f"INSERT INTO {TURN_TRIGRAM}({TURN_TRIGRAM}, rowid, content) "
        "VALUES ('delete', old.id, old.content); "
        f"INSERT INTO {TURN_TRIGRAM}(rowid, content) VALUES (new.id, new.content); "
        "END",
        f"CREATE TRIGGER turn_search_au AFTER UPDATE OF {TURN_WATCHED} ON memory_contextturn "
        f"BEGIN {log} ('turn', new.id); END",
        # Index what was stored before this migration.
        f"INSERT INTO {MEMORY_WORD}(rowid, tokens) "
        f"SELECT id, {TOKENS_FUNCTION}(search_text) FROM memory_memory",
        f"INSERT INTO {MEMORY_TRIGRAM}({MEMORY_TRIGRAM}) VALUES ('rebuild')",
        f"INSERT INTO {TURN_WORD}(rowid, tokens) "
        f"SELECT id, {TOKENS_FUNCTION}({TURN_TEXT.format(row='memory_contextturn')}) "
        "FROM memory_contextturn",
        f"INSERT INTO {TURN_TRIGRAM}({TURN_TRIGRAM}) VALUES ('rebuild')",
    ]


def memory_watch_trigger(vendor: str, columns: str) -> str:
    """The trigger that logs a memory whose `columns` changed (one place, so a migration can
    re-create it when the watched columns change)."""
    if vendor == "sqlite":
        return (
            f"CREATE TRIGGER memory_search_au AFTER UPDATE OF {columns} ON memory_memory "
            f"BEGIN INSERT INTO {CHANGE_TABLE}(kind, row_id) VALUES ('memory', new.id); END"
        )
    return (
        f"CREATE TRIGGER memory_search_au AFTER UPDATE OF {columns} ON memory_memory "
        "FOR EACH ROW EXECUTE FUNCTION tideline_search_log('memory')"
    )


def memory_watch_sql(vendor: str, columns: str) -> list[str]:
    """Statements that re-create the memory watch trigger over `columns`."""
    drop = "DROP TRIGGER IF EXISTS memory_search_au"
    if vendor == "postgresql":
        drop += " ON memory_memory"
    return [drop, memory_watch_trigger(vendor, columns)]


def _sqlite_remove() -> list[str]:
    triggers = (
        "memory_search_ai",
        "memory_search_au_text",
        "memory_search_au",
        "memory_search_narrative_ai",
        "memory_search_narrative_au",
        "turn_search_ai",
        "turn_search_au_text",
        "turn_search_au",
    )
    tables = (MEMORY_WORD, MEMORY_TRIGRAM, TURN_WORD, TURN_TRIGRAM, CHANGE_TABLE)
    return [f"DROP TRIGGER IF EXISTS {name}" for name in triggers] + [
        f"DROP TABLE IF EXISTS {name}" for name in tables
    ]


def _postgresql_install() -> list[str]:
    return [
        f"CREATE TABLE {CHANGE_TABLE} (seq BIGSERIAL PRIMARY KEY, kind TEXT NOT NULL, "
        "row_id BIGINT NOT NULL, "
        "token BIGINT NOT NULL DEFAULT (floor(random() * 9007199254740991))::bigint)",
        "CREATE OR REPLACE FUNCTION tideline_search_log() RETURNS trigger AS $$ BEGIN "
        f"INSERT INTO {CHANGE_TABLE}(kind, row_id) VALUES (TG_ARGV[0], NEW.id); "
        "RETURN NULL; END; $$ LANGUAGE plpgsql",
        "CREATE OR REPLACE FUNCTION tideline_search_log_narrative() RETURNS trigger AS $$ BEGIN "
        f"INSERT INTO {CHANGE_TABLE}(kind, row_id) VALUES ('memory', NEW.memory_ptr_id); "
        "RETURN NULL; END; $$ LANGUAGE plpgsql",
        "CREATE TRIGGER memory_search_ai AFTER INSERT ON memory_memory "
        "FOR EACH ROW EXECUTE FUNCTION tideline_search_log('memory')",
        memory_watch_trigger("postgresql", MEMORY_WATCHED),
        "CREATE TRIGGER memory_search_narrative_ai AFTER INSERT ON memory_narrative "
        "FOR EACH ROW EXECUTE FUNCTION tideline_search_log_narrative()",
        "CREATE TRIGGER memory_search_narrative_au AFTER UPDATE OF weight, layer "
        "ON memory_narrative FOR EACH ROW EXECUTE FUNCTION tideline_search_log_narrative()",
        "CREATE TRIGGER turn_search_ai AFTER INSERT ON memory_contextturn "
        "FOR EACH ROW EXECUTE FUNCTION tideline_search_log('turn')",
        f"CREATE TRIGGER turn_search_au AFTER UPDATE OF {TURN_WATCHED} ON memory_contextturn "
        "FOR EACH ROW EXECUTE FUNCTION tideline_search_log('turn')",
    ]


def _postgresql_remove() -> list[str]:
    return [
        "DROP TRIGGER IF EXISTS memory_search_ai ON memory_memory",
        "DROP TRIGGER IF EXISTS memory_search_au ON memory_memory",
        "DROP TRIGGER IF EXISTS memory_search_narrative_ai ON memory_narrative",
        "DROP TRIGGER IF EXISTS memory_search_narrative_au ON memory_narrative",
        "DROP TRIGGER IF EXISTS turn_search_ai ON memory_contextturn",
        "DROP TRIGGER IF EXISTS turn_search_au ON memory_contextturn",
        "DROP FUNCTION IF EXISTS tideline_search_log()",
        "DROP FUNCTION IF EXISTS tideline_search_log_narrative()",
        f"DROP TABLE IF EXISTS {CHANGE_TABLE}",
    ]


def search_schema_sql(vendor: str, *, install: bool) -> list[str]:
    if vendor == "sqlite":
        return _sqlite_install() if install else _sqlite_remove()
    if vendor == "postgresql":
        return _postgresql_install() if install else _postgresql_remove()
    raise ImproperlyConfigured(
        f"Tideline supports SQLite and PostgreSQL; no search index for database vendor {vendor!r}"
    )


def connection_prepare(sender, connection, **kwargs) -> None:
    """Register `tideline_tokens` on each new SQLite connection: the FTS triggers call it, so the
    word index is written in the same transaction as the row it indexes."""
    if connection.vendor != "sqlite":
        return
    connection.connection.create_function(TOKENS_FUNCTION, 1, _tokens_or_empty, deterministic=True)


def _tokens_or_empty(text: str | None) -> str:
    from memory.search.text import text_tokens

    return text_tokens(text or "")
