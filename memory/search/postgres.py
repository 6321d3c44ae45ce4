"""PostgreSQL-native search: the lexical index, its BM25 statistics and (with pgvector) the vectors
live in the database, so no process holds a copy of the corpus.

What is stored, per kind of document (memories, turns):

- `<kind>_search_doc`: one row per memory or turn — its scope, BM25 length, the term bag the
  in-process index would build (`bag`, term → frequency; a turn's holds its neighbours' terms and
  its month and year at their weights), a turn's own terms (`own`, what a literal must be found
  in), and, when the `vector` extension is installed, the embedding as a pgvector `vector` with an
  HNSW cosine index per dimension.
- `tideline_search_posting`: one row per (document, term) with the term's frequency, the
  document's scope and length, indexed by (kind, term, scope) with the rest included, so candidate
  generation adds up BM25 in an index-only scan instead of reading every document a common term
  is in.
- `tideline_search_df` (document frequency per scope and term) and `tideline_search_totals`
  (documents and summed length per scope): BM25's collection statistics for any set of scopes,
  exactly the N, df and average length the in-process index computes over the caller's scopes.
  A caller who may not see secret memories gets them subtracted (the few secret documents of the
  scopes, read through the memory_secret_scope index), as the in-process index leaves them out.
- `tideline_search_speaker`: each turn speaker's terms under the scope they spoke in (migration
  0019), for reading a misspelt name as a speaker's of the caller's scopes.

Terms are computed in Python (the same `text_terms` and turn documents as the in-process index:
stemmed words, jieba words, CJK bigrams), so triggers cannot compute them; instead triggers queue
the changed row ids (with the queueing transaction's id) in `tideline_search_pending` in the
writer's transaction, and the writer applies them itself: PostgreSQL connections use
tideline_site.postgresql, which notes a statement writing memories or turns and, just before the
transaction commits, applies exactly the rows it queued (native_apply_own) under an advisory lock
taken at that point. Documents and statistics therefore commit with the rows, and no search
inherits a backlog. A write outside a transaction is applied right after its statement. Rows
queued past this path (another client, a restore, migration 0011 on an existing store) are
applied by the beat's search-queue-drain in short transactions; a search applies at most
SEARCH_APPLY_LIMIT of them.

A query is two statements: the collection statistics (with speaker terms, scope labels and the
queue probe), then the candidates and their rows (one CTE per candidate source), which also carry
the term-less literals' ILIKE flags and the raw text of every row a literal may match, so ranking
reads nothing more; the typed rows returned are the third.

A query builds a small candidate view — every document of the caller's scopes when they hold at
most TIDELINE_SEARCH_POSTGRES_EXACT_ROWS, otherwise the best lexical candidates by BM25 computed
in SQL, the nearest and farthest vectors, and the raw-text hits of term-less literals — and hands
it to the same ranking code as the in-process index, with the collection statistics of the whole
scope set. Up to EXACT_ROWS the ranking is the SQLite backend's exactly (the test suite holds both
to it); past it, a row outside every candidate set cannot be returned — a row matching only terms
of near-zero idf, or one whose priors alone would lift it past the candidates (the in-process
index ranks every such row; the difference is bounded by the priors, ≤ 0.13 of score).

Literal substrings use ILIKE (not Django's UPPER(…) LIKE, which no trigram index serves); with `pg_trgm` installed, GIN `gin_trgm_ops` indexes on the memory
and turn text serve it. Without `pg_trgm` ILIKE scans (correct, slower on big stores).

Without the `vector` extension, the fallback for semantic search is a per-process float32 matrix of
the vectors only (`VectorIndex`, refreshed from the change log like the in-process index): memory
grows with the store in that mode, by dim × 4 bytes per row; lexical search stays in the database.
"""

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
import psycopg
from django.conf import settings
from django.db import DatabaseError, ProgrammingError, connection, migrations, transaction

from memory.models import ContextTurn, Memory, Scope
from memory.search.index import (
    LAYER_CODES,
    NO_TIME,
    STATUS_CODES,
    TYPE_CODES,
    MemoryIndex,
    SearchIndex,
    TurnIndex,
    _Columns,
    _one_edit_apart,
    memory_weights,
    turn_documents,
)
from memory.search.intent import (
    NAMES_PROPER,
    QUESTION_END,
    STATES_NUMBER,
    asks_for_number,
    asks_for_place,
    asks_when,
)
from memory.search.text import query_literals, text_compared, text_terms
from memory.search.timing import time_terms

logger = logging.getLogger("tideline.search")

DOC_TABLES = {"memory": "memory_search_doc", "turn": "turn_search_doc"}
SOURCE_TABLES = {"memory": "memory_memory", "turn": "memory_contextturn"}
PENDING = "tideline_search_pending"
DF = "tideline_search_df"
TOTALS = "tideline_search_totals"
SPEAKERS = "tideline_search_speaker"
# One row per (document, term): what candidate generation reads instead of every document that
# holds a common term (migration 0014).
POSTINGS = "tideline_search_posting"
# pg_advisory_xact_lock key serialising appliers of the pending queue ("tide" in ASCII).
APPLY_LOCK = 0x74696465
APPLY_CHUNK = 2000
# A search applies at most this many queued rows (a backlog is the write path's to apply).
SEARCH_APPLY_LIMIT = 200
# A btree entry must fit in a third of a page (2704 bytes): a longer term is ranked when its row is
# a candidate for another reason, but cannot make it one.
MAX_POSTING_TERM_BYTES = 2000
WRITES = {"INSERT", "UPDATE", "DELETE"}
APPLY_SAVEPOINT = "tideline_search_apply"
QUEUE_MISSING = (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn)
FARTHEST = 50
# Rows a caller may not see (secrets), left out of candidates. A hashed subplan: `<> ALL(array)`
# compares each row with every id (14 s for 200k rows against 20k ids here, this 48 ms).
NOT_WITHHELD = "NOT IN (SELECT unnest(%s::bigint[]))"
COMMON_DF_SHARE = 0.1
NEGLIGIBLE_SHARE = 0.01
MEMORY_PENDING_WATCHED = "search_text, scope_id, embedding, embedding_model"
TURN_PENDING_WATCHED = (
    "scope_id, session_id, seq, occurred_at, speaker, content, embedding, embedding_model"
)
WATCHED_COLUMNS = {
    SOURCE_TABLES["memory"]: [column.strip() for column in MEMORY_PENDING_WATCHED.split(",")],
    SOURCE_TABLES["turn"]: [column.strip() for column in TURN_PENDING_WATCHED.split(",")],
}


# --- schema ------------------------------------------------------------------------------------


def _extension_ensure(schema_editor, name: str) -> bool:
    """Install extension `name` when the server has it; False when it cannot be installed."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = %s", [name])
        if cursor.fetchone() is None:
            return False
        try:
            with transaction.atomic(using=schema_editor.connection.alias):
                cursor.execute(f"CREATE EXTENSION IF NOT EXISTS {name}")
        except DatabaseError:
            logger.warning("PostgreSQL extension %s is available but could not be installed", name)
            return False
    return True


def native_schema_install(schema_editor) -> None:
    """Create the native search tables, triggers and indexes (PostgreSQL only)."""
    if schema_editor.connection.vendor != "postgresql":
        return
    vector = _extension_ensure(schema_editor, "vector")
    trigram = _extension_ensure(schema_editor, "pg_trgm")
    for statement in native_schema_sql(vector=vector, trigram=trigram):
        schema_editor.execute(statement)


def native_schema_remove(schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in native_schema_remove_sql():
        schema_editor.execute(statement)


def native_schema_sql(*, vector: bool, trigram: bool) -> list[str]:
    statements = [
        f"CREATE TABLE {PENDING} (seq BIGSERIAL PRIMARY KEY, kind TEXT NOT NULL, "
        "row_id BIGINT NOT NULL)",
        f"CREATE INDEX {PENDING}_kind ON {PENDING} (kind, seq)",
        f"CREATE TABLE {DF} (kind TEXT NOT NULL, term TEXT NOT NULL, scope_id BIGINT NOT NULL, "
        "df INTEGER NOT NULL, PRIMARY KEY (kind, term, scope_id))",
        f"CREATE TABLE {TOTALS} (kind TEXT NOT NULL, scope_id BIGINT NOT NULL, "
        "docs BIGINT NOT NULL, length DOUBLE PRECISION NOT NULL, PRIMARY KEY (kind, scope_id))",
        f"CREATE TABLE {SPEAKERS} (term TEXT PRIMARY KEY)",
    ]
    for kind, table in DOC_TABLES.items():
        statements += [
            f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, scope_id BIGINT NOT NULL, "
            "length REAL NOT NULL, bag JSONB NOT NULL, own TEXT[], tsv TSVECTOR NOT NULL, "
            "model TEXT, dim INTEGER" + (", embedding vector" if vector else "") + ")",
            f"CREATE INDEX {table}_tsv ON {table} USING gin (tsv)",
            f"CREATE INDEX {table}_scope ON {table} (scope_id)",
            # Everything stored before this migration is indexed by the first search.
            f"INSERT INTO {PENDING}(kind, row_id) SELECT '{kind}', id FROM {SOURCE_TABLES[kind]}",
        ]
    statements += [
        "CREATE FUNCTION tideline_search_pend() RETURNS trigger AS $$ BEGIN "
        f"IF TG_OP = 'DELETE' THEN INSERT INTO {PENDING}(kind, row_id) VALUES (TG_ARGV[0], OLD.id); "
        f"ELSE INSERT INTO {PENDING}(kind, row_id) VALUES (TG_ARGV[0], NEW.id); END IF; "
        "RETURN NULL; END; $$ LANGUAGE plpgsql",
        _truncate_function_sql(postings=False),
    ]
    for kind, watched in (("memory", MEMORY_PENDING_WATCHED), ("turn", TURN_PENDING_WATCHED)):
        source = SOURCE_TABLES[kind]
        changed = " OR ".join(
            f"OLD.{column.strip()} IS DISTINCT FROM NEW.{column.strip()}"
            for column in watched.split(",")
        )
        statements += [
            f"CREATE TRIGGER {kind}_search_pend_aid AFTER INSERT OR DELETE ON {source} "
            f"FOR EACH ROW EXECUTE FUNCTION tideline_search_pend('{kind}')",
            f"CREATE TRIGGER {kind}_search_pend_au AFTER UPDATE OF {watched} ON {source} "
            f"FOR EACH ROW WHEN ({changed}) EXECUTE FUNCTION tideline_search_pend('{kind}')",
            f"CREATE TRIGGER {kind}_search_truncate AFTER TRUNCATE ON {source} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION tideline_search_truncate('{kind}')",
        ]
    if trigram:
        statements += [
            "CREATE INDEX memory_search_text_trgm ON memory_memory "
            "USING gin (search_text gin_trgm_ops)",
            "CREATE INDEX turn_search_content_trgm ON memory_contextturn "
            "USING gin (content gin_trgm_ops)",
        ]
    return statements


def _truncate_function_sql(*, postings: bool) -> str:
    """Django's test flush truncates the stored rows; their documents and statistics go too."""
    also = f"DELETE FROM {POSTINGS} WHERE kind = TG_ARGV[0]; " if postings else ""
    return (
        "CREATE OR REPLACE FUNCTION tideline_search_truncate() RETURNS trigger AS $$ BEGIN "
        "IF TG_ARGV[0] = 'memory' THEN TRUNCATE memory_search_doc; "
        f"ELSE TRUNCATE turn_search_doc, {SPEAKERS}; END IF; "
        f"DELETE FROM {DF} WHERE kind = TG_ARGV[0]; DELETE FROM {TOTALS} WHERE kind = TG_ARGV[0]; "
        f"{also}DELETE FROM {PENDING} WHERE kind = TG_ARGV[0]; RETURN NULL; END; $$ LANGUAGE plpgsql"
    )


def _bag_postings_sql(kind: str) -> str:
    """The postings (id, term, scope_id, tf, length) that `kind`'s stored term bags call for."""
    return (
        "SELECT d.id, e.key AS term, d.scope_id, e.value::float8 AS tf, d.length "
        f"FROM {DOC_TABLES[kind]} d, jsonb_each_text(d.bag) AS e "
        f"WHERE octet_length(e.key) <= {MAX_POSTING_TERM_BYTES}"
    )


def _postings_fill_sql(kind: str) -> str:
    return (
        f"INSERT INTO {POSTINGS} (kind, id, term, scope_id, tf, length) "
        f"SELECT '{kind}', * FROM ({_bag_postings_sql(kind)}) AS bag"
    )


def native_postings_sql(*, install: bool) -> list[str]:
    """Term postings in place of each document's tsvector (migration 0014). A GIN match on a term
    held by a tenth of the store reads each of those documents from the heap (tens of ms at 100k);
    the postings index holds the term, scope, tf and length, so BM25 over them is an index-only
    scan."""
    if not install:
        statements = []
        for table in DOC_TABLES.values():
            statements += [
                f"ALTER TABLE {table} ADD COLUMN tsv TSVECTOR",
                f"UPDATE {table} SET tsv = array_to_tsvector(ARRAY(SELECT term FROM "
                f"jsonb_object_keys(bag) AS term WHERE octet_length(term) <= "
                f"{MAX_POSTING_TERM_BYTES}))",
                f"ALTER TABLE {table} ALTER COLUMN tsv SET NOT NULL",
                f"CREATE INDEX {table}_tsv ON {table} USING gin (tsv)",
            ]
        return [
            *statements,
            _truncate_function_sql(postings=False),
            f"DROP TABLE {POSTINGS}",
        ]
    statements = [
        f"CREATE TABLE {POSTINGS} (kind TEXT NOT NULL, id BIGINT NOT NULL, term TEXT NOT NULL, "
        "scope_id BIGINT NOT NULL, tf DOUBLE PRECISION NOT NULL, length REAL NOT NULL, "
        "PRIMARY KEY (kind, id, term))",
        f"CREATE INDEX {POSTINGS}_term ON {POSTINGS} (kind, term, scope_id) "
        "INCLUDE (id, tf, length)",
    ]
    for kind, table in DOC_TABLES.items():
        statements += [
            _postings_fill_sql(kind),
            f"DROP INDEX {table}_tsv",
            f"ALTER TABLE {table} DROP COLUMN tsv",
        ]
    return [*statements, _truncate_function_sql(postings=True), f"ANALYZE {POSTINGS}"]


def native_sql_migration(statements: Callable[..., list[str]]) -> migrations.RunPython:
    """A migration step running `statements(install=True)` forwards and `statements(install=False)`
    backwards, on PostgreSQL only (SQLite has no native search schema)."""

    def step(*, install: bool):
        def run(apps, schema_editor) -> None:
            if schema_editor.connection.vendor == "postgresql":
                for statement in statements(install=install):
                    schema_editor.execute(statement)

        return run

    return migrations.RunPython(step(install=True), step(install=False))


def native_pending_xact_sql(*, install: bool) -> list[str]:
    """The queueing transaction's id on each pending row (migration 0012): what lets a writer
    apply exactly the rows it queued, before it commits."""
    if not install:
        return [f"ALTER TABLE {PENDING} DROP COLUMN IF EXISTS xact"]
    return [
        f"ALTER TABLE {PENDING} ADD COLUMN xact BIGINT NOT NULL DEFAULT txid_current()",
        f"CREATE INDEX {PENDING}_xact ON {PENDING} (xact)",
    ]


def native_speakers_scope(apps, schema_editor) -> None:
    """Each speaker's terms under the scopes they spoke in (migration 0019): a query reads a
    misspelt name as the name of someone who spoke in the caller's scopes only, and another
    scope's speakers never change its reading or its expansions. Filled from the stored turns."""
    if schema_editor.connection.vendor != "postgresql":
        return
    named: set[tuple[int, str]] = set()
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT scope_id, speaker FROM {SOURCE_TABLES['turn']}")
        for scope_id, speaker in cursor.fetchall():
            named.update((scope_id, term) for term in text_terms(speaker or ""))
    schema_editor.execute(f"DROP TABLE {SPEAKERS}")
    schema_editor.execute(
        f"CREATE TABLE {SPEAKERS} (scope_id BIGINT NOT NULL, term TEXT NOT NULL, "
        "PRIMARY KEY (scope_id, term))"
    )
    if named:
        schema_editor.execute(
            f"INSERT INTO {SPEAKERS} (scope_id, term) SELECT * FROM unnest(%s::bigint[], "
            "%s::text[])",
            list(map(list, zip(*sorted(named), strict=True))),
        )


def native_speakers_unscope(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT term FROM {SPEAKERS}")
        terms = sorted(term for (term,) in cursor.fetchall())
    schema_editor.execute(f"DROP TABLE {SPEAKERS}")
    schema_editor.execute(f"CREATE TABLE {SPEAKERS} (term TEXT PRIMARY KEY)")
    if terms:
        schema_editor.execute(f"INSERT INTO {SPEAKERS} (term) SELECT unnest(%s::text[])", [terms])


def native_schema_remove_sql() -> list[str]:
    statements = []
    for kind, source in SOURCE_TABLES.items():
        statements += [
            f"DROP TRIGGER IF EXISTS {kind}_search_pend_aid ON {source}",
            f"DROP TRIGGER IF EXISTS {kind}_search_pend_au ON {source}",
            f"DROP TRIGGER IF EXISTS {kind}_search_truncate ON {source}",
        ]
    return [
        *statements,
        "DROP INDEX IF EXISTS memory_search_text_trgm",
        "DROP INDEX IF EXISTS turn_search_content_trgm",
        "DROP FUNCTION IF EXISTS tideline_search_pend()",
        "DROP FUNCTION IF EXISTS tideline_search_truncate()",
        *(f"DROP TABLE IF EXISTS {table}" for table in DOC_TABLES.values()),
        f"DROP TABLE IF EXISTS {PENDING}, {DF}, {TOTALS}, {SPEAKERS}",
    ]


# --- capabilities --------------------------------------------------------------------------------

_capabilities: dict[str, dict[str, bool]] = {}


def native_active() -> bool:
    """Whether searches on this connection use the database-native backend."""
    return connection.vendor == "postgresql" and settings.TIDELINE_SEARCH_POSTGRES == "native"


def _database_key() -> str:
    database = connection.settings_dict
    return f"{database['HOST']}{database['OPTIONS'].get('host', '')}:{database['PORT']}/" + str(
        database["NAME"]
    )


def capabilities() -> dict[str, bool]:
    """{"vector": documents hold pgvector embeddings, "trigram": pg_trgm indexes the text}.
    Read once per process and database: they change only with a migration."""
    key = _database_key()
    found = _capabilities.get(key)
    if found is None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_name = %s "
                "AND column_name = 'embedding'",
                [DOC_TABLES["memory"]],
            )
            vector = cursor.fetchone() is not None
            cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = 'memory_search_text_trgm'")
            trigram = cursor.fetchone() is not None
        found = _capabilities[key] = {"vector": vector, "trigram": trigram}
    return found


# --- applying the pending queue ------------------------------------------------------------------


def _python_terms(ids: list[int], texts: dict[int, str]) -> dict[int, list[str]]:
    return {pk: text_terms(texts.get(pk, "")) for pk in ids}


def _vector_text(blob, model_id: str | None) -> tuple[str | None, int | None]:
    if not blob or not model_id:
        return None, None
    vector = np.frombuffer(bytes(blob), dtype=np.float32)
    return "[" + ",".join(map(str, vector.tolist())) + "]", int(vector.shape[0])


def native_sync(kind: str, *, limit: int | None = None) -> int:
    """Apply the pending queue for `kind` to the stored documents and statistics, at most `limit`
    rows when given; returns how many rows were applied. Cheap (one indexed probe) when nothing
    is pending."""
    applied = 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {PENDING} WHERE kind = %s)", [kind])
        if not cursor.fetchone()[0]:
            return 0
    outer = connection.in_atomic_block
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            if outer:
                # Inside the caller's transaction the lock would be held until it ends: only
                # apply when nobody else is, otherwise search what is already applied.
                cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [APPLY_LOCK])
                if not cursor.fetchone()[0]:
                    return applied
            else:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [APPLY_LOCK])
            cursor.execute(
                f"DELETE FROM {PENDING} WHERE seq IN (SELECT seq FROM {PENDING} WHERE kind = %s "
                "ORDER BY seq LIMIT %s) RETURNING row_id",
                [kind, APPLY_CHUNK if limit is None else min(APPLY_CHUNK, limit - applied)],
            )
            ids = list(dict.fromkeys(row[0] for row in cursor.fetchall()))
            if not ids:
                return applied
            _apply(cursor, kind, ids)
            applied += len(ids)
            if limit is not None and applied >= limit:
                return applied


def native_queue_drain() -> dict[str, int]:
    """Apply whatever is queued, in short transactions of APPLY_CHUNK rows (the beat's sweep):
    rows written past this connection class, or before migration 0011, never wait for a
    search."""
    if not native_active():
        return {}
    return {kind: native_sync(kind) for kind in DOC_TABLES}


def native_write_watch(execute, sql, params, many, context):
    """Execute wrapper of every PostgreSQL connection (tideline_site/postgresql): notes a statement
    that may have queued memories or turns. Inside a transaction the connection applies the queue
    at commit (native_apply_own); a statement that committed itself (autocommit) is applied right
    after it, in bounded batches."""
    result = execute(sql, params, many, context)
    if _queues_search(sql) and settings.TIDELINE_SEARCH_POSTGRES == "native" and _queue_ready():
        wrapper = context["connection"]
        if wrapper.get_autocommit():
            try:
                for kind in DOC_TABLES:
                    native_sync(kind, limit=APPLY_CHUNK)
            except ProgrammingError as exc:
                # Migrated back past 0012 since this process looked: nothing to apply.
                if not isinstance(exc.__cause__, QUEUE_MISSING):
                    raise
                _queue_ready_in.discard(_database_key())
        else:
            wrapper.search_queued = True
    return result


_queue_ready_in: set[str] = set()


def _queues_search(sql: str) -> bool:
    """Whether a statement may fire the queueing triggers: a write naming memories or turns,
    and for an update one assigning a watched column (so recall's activation counters, updated on
    every injection, queue nothing and cost the commit nothing). Conservative: a false positive
    costs one statement at commit."""
    head = sql.lstrip()[:6].upper()
    if head not in WRITES:
        return False
    tables = [table for table in SOURCE_TABLES.values() if table in sql]
    if not tables or head != "UPDATE":
        return bool(tables)
    assigned = sql.split(" WHERE ", 1)[0]
    return any(column in assigned for table in tables for column in WATCHED_COLUMNS[table])


def _queue_ready() -> bool:
    """Whether this database queues writes with their transaction (migration 0012 applied);
    remembered once true. Before it (while migrating) writes queue nothing to apply."""
    key = _database_key()
    if key not in _queue_ready_in:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_name = %s "
                "AND column_name = 'xact'",
                [PENDING],
            )
            if cursor.fetchone() is None:
                return False
        _queue_ready_in.add(key)
    return True


def native_apply_own(wrapper, *, wait: bool = True) -> int:
    """Apply the rows the open transaction queued, in that transaction: called just before it
    commits, so documents and statistics commit with the rows. Appliers are serialised by
    APPLY_LOCK, taken here at the end of the transaction (it holds no other lock the appliers
    need, so this cannot deadlock) and released by the commit. With `wait=False` (a search inside
    the writer's transaction) nothing is applied while another applier holds the lock. Returns
    how many rows were applied."""
    # The lock is taken (an init plan) once a queued row of this transaction is found, so a
    # transaction with nothing queued takes none. At commit the deferred constraint checks run
    # first: run at COMMIT they would wait for row locks (a foreign key's target, locked FOR
    # UPDATE by a writer queued behind this lock) while holding it.
    delete = (
        f"DELETE FROM {PENDING} WHERE xact = txid_current() AND "
        + (
            f"(SELECT true FROM (SELECT pg_advisory_xact_lock({APPLY_LOCK})) AS waited)"
            if wait
            else f"(SELECT pg_try_advisory_xact_lock({APPLY_LOCK}))"
        )
        + " RETURNING kind, row_id"
    )
    with wrapper.cursor() as cursor:
        # One round trip: a statement without parameters may hold several. The savepoint lets
        # a store migrated back past 0012 (no queue to apply) still commit.
        try:
            cursor.execute(
                f"SAVEPOINT {APPLY_SAVEPOINT}; SET CONSTRAINTS ALL IMMEDIATE; {delete}"
                if wait
                else delete
            )
        except ProgrammingError as exc:
            if not wait or not isinstance(exc.__cause__, QUEUE_MISSING):
                raise
            cursor.execute(f"ROLLBACK TO SAVEPOINT {APPLY_SAVEPOINT}")
            _queue_ready_in.discard(_database_key())
            return 0
        while cursor.description is None and cursor.nextset():
            continue
        queued = cursor.fetchall()
        applied = 0
        for kind in DOC_TABLES:
            ids = list(
                dict.fromkeys(row_id for queued_kind, row_id in queued if queued_kind == kind)
            )
            for start in range(0, len(ids), APPLY_CHUNK):
                _apply(cursor, kind, ids[start : start + APPLY_CHUNK])
            applied += len(ids)
    return applied


def _documents(
    kind: str, ids: list[int], speakers: dict[int, set[str]]
) -> dict[int, tuple[int, dict[str, float], list[str] | None, object, str | None]]:
    """(scope, term bag, own terms, vector blob, model) of the documents that change when rows
    `ids` change (a turn's neighbours too), as the current code and settings compute them."""
    documents = {}
    if kind == "memory":
        for pk, scope_id, text, blob, model_id in Memory.objects.filter(pk__in=ids).values_list(
            "pk", "scope_id", "search_text", "embedding", "embedding_model"
        ):
            documents[pk] = (scope_id, Counter(text_terms(text or "")), None, blob, model_id)
    else:
        for document in turn_documents(ids, terms_for=_python_terms, speakers=speakers):
            documents[document.pk] = (
                document.values["scope"],
                document.bag,
                sorted(document.own),
                document.blob,
                document.model_id,
            )
    return documents


def _document_current(stored: tuple, document: tuple | None, *, vector: bool) -> bool:
    """Whether a stored document row (id, scope, length, bag, own, model, dim, embedding text) is
    what `_apply` would write now for `document` (see `_documents`). The scope decides which
    searches see the row, the length its BM25 normalisation and the model, dimension and vector
    its pgvector candidates, so each is compared, not only the terms."""
    if document is None:
        return False
    _, scope_id, length, bag, own, model, dim, embedding = stored
    bag = json.loads(bag) if isinstance(bag, str) else bag
    scope, terms, own_terms, blob, model_id = document
    expected_text, expected_dim = _vector_text(blob, model_id) if vector else (None, None)
    if (scope_id, bag, own) != (scope, dict(terms), own_terms):
        return False
    if abs(length - float(np.float32(sum(terms.values())))) > 1e-6 * max(1.0, length):
        return False
    if (model, dim) != ((model_id, expected_dim) if expected_text else (None, None)):
        return False
    if not expected_text:
        return embedding is None
    return embedding is not None and np.array_equal(
        np.asarray(json.loads(embedding), dtype=np.float32),
        np.frombuffer(bytes(blob), dtype=np.float32),
    )


def native_drift(kind: str) -> tuple[list[int], list[int], list[int]]:
    """(missing, orphaned, stale) stored documents of `kind`: rows with no document, documents (or
    term postings) with no row, and documents whose terms differ from what the current code and
    settings compute (an upgrade that changed the terms, or a change to
    TIDELINE_SEARCH_TURN_NEIGHBOURS, _NEIGHBOUR_WEIGHT or _DATE_WEIGHT, which are read when a
    document is written, or a row whose scope or vector changed while its document did not) or
    whose postings differ from their term bag."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {SOURCE_TABLES[kind]}")
        source = {row[0] for row in cursor.fetchall()}
        cursor.execute(f"SELECT id FROM {DOC_TABLES[kind]}")
        stored = {row[0] for row in cursor.fetchall()}
        # Queued rows are not drift: the next search or the beat's drain applies them.
        cursor.execute(f"SELECT row_id FROM {PENDING} WHERE kind = %s", [kind])
        queued = {row[0] for row in cursor.fetchall()}
        cursor.execute(
            f"SELECT DISTINCT coalesce(d.id, p.id) FROM ({_bag_postings_sql(kind)}) AS d "
            f"FULL JOIN (SELECT id, term, tf, scope_id, length FROM {POSTINGS} "
            "WHERE kind = %s) AS p ON p.id = d.id AND p.term = d.term AND p.tf = d.tf "
            "AND p.scope_id = d.scope_id AND p.length = d.length "
            "WHERE d.id IS NULL OR p.id IS NULL",
            [kind],
        )
        misposted = {row[0] for row in cursor.fetchall()} - queued
    source -= queued
    stored -= queued
    stale = list(misposted & source & stored)
    present = sorted(source & stored)
    vector = capabilities()["vector"]
    embedding = "embedding::text" if vector else "NULL"
    for start in range(0, len(present), APPLY_CHUNK):
        chunk = present[start : start + APPLY_CHUNK]
        documents = _documents(kind, chunk, {})
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, scope_id, length, bag, own, model, dim, {embedding} "
                f"FROM {DOC_TABLES[kind]} WHERE id = ANY(%s)",
                [chunk],
            )
            stale += [
                row[0]
                for row in cursor.fetchall()
                if not _document_current(row, documents.get(row[0]), vector=vector)
            ]
    return (
        sorted(source - stored),
        sorted((stored - source) | (misposted - source)),
        sorted(set(stale)),
    )


def _df_recount_sql(kind: str) -> str:
    """(term, scope_id, df) of `kind` counted from the stored documents."""
    return (
        "SELECT term, scope_id, count(*) AS df "
        f"FROM {DOC_TABLES[kind]}, jsonb_object_keys(bag) AS term GROUP BY term, scope_id"
    )


def _totals_recount_sql(kind: str) -> str:
    """(scope_id, docs, length) of `kind` counted from the stored documents."""
    return (
        "SELECT scope_id, count(*) AS docs, sum(length::float8) AS length "
        f"FROM {DOC_TABLES[kind]} GROUP BY scope_id"
    )


def native_statistics_drift(kind: str) -> int:
    """How many of `kind`'s BM25 statistics (a term's document frequency in a scope, a scope's
    document count and total length) disagree with a recount from the stored documents. Applies
    keep them by deltas under APPLY_LOCK; a lost or doubled delta (a race, a hand edit, a partial
    restore) skews every score in that scope without making any one document stale."""
    with connection.cursor() as cursor:
        # A term whose documents all left keeps a zero row: it counts as absent.
        cursor.execute(
            f"SELECT count(*) FROM ({_df_recount_sql(kind)}) AS counted "
            f"FULL JOIN (SELECT term, scope_id, df FROM {DF} WHERE kind = %s AND df <> 0) AS kept "
            "USING (term, scope_id) WHERE counted.df IS DISTINCT FROM kept.df",
            [kind],
        )
        off = cursor.fetchone()[0]
        # Lengths are sums of float deltas: equal up to rounding, not bit for bit.
        cursor.execute(
            f"SELECT count(*) FROM ({_totals_recount_sql(kind)}) AS counted "
            f"FULL JOIN (SELECT scope_id, docs, length FROM {TOTALS} "
            "WHERE kind = %s AND docs <> 0) AS kept USING (scope_id) "
            "WHERE counted.docs IS DISTINCT FROM kept.docs "
            "OR abs(counted.length - kept.length) > 1e-6 * greatest(1, abs(counted.length))",
            [kind],
        )
        return off + cursor.fetchone()[0]


def native_statistics_rebuild(kind: str) -> None:
    """Recount `kind`'s document frequencies and per-scope totals, and rewrite its term postings,
    from the stored documents: applies keep them by deltas, which cannot undo a document changed
    outside them (a restore, a hand edit)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [APPLY_LOCK])
        cursor.execute(f"DELETE FROM {DF} WHERE kind = %s", [kind])
        cursor.execute(
            f"INSERT INTO {DF} (kind, term, scope_id, df) "
            f"SELECT %s, * FROM ({_df_recount_sql(kind)}) AS counted",
            [kind],
        )
        cursor.execute(f"DELETE FROM {TOTALS} WHERE kind = %s", [kind])
        cursor.execute(
            f"INSERT INTO {TOTALS} (kind, scope_id, docs, length) "
            f"SELECT %s, * FROM ({_totals_recount_sql(kind)}) AS counted",
            [kind],
        )
        cursor.execute(f"DELETE FROM {POSTINGS} WHERE kind = %s", [kind])
        cursor.execute(_postings_fill_sql(kind))


def native_requeue(kind: str, ids: list[int]) -> None:
    """Queue rows `ids` of `kind` for their documents to be recomputed by the next apply."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {PENDING}(kind, row_id) SELECT %s, unnest(%s::bigint[])", [kind, ids]
        )


def _apply(cursor, kind: str, ids: list[int]) -> None:
    table = DOC_TABLES[kind]
    speakers: dict[int, set[str]] = {}
    documents = _documents(kind, ids, speakers)
    touched = sorted(set(ids) | set(documents))
    cursor.execute(f"SELECT id, scope_id, length, bag FROM {table} WHERE id = ANY(%s)", [touched])
    df: Counter = Counter()
    totals: dict[int, list[float]] = {}
    stored = []
    for pk, scope_id, length, bag in cursor.fetchall():
        stored.append(pk)
        bag = json.loads(bag) if isinstance(bag, str) else bag
        for term in bag:
            df[(term, scope_id)] -= 1
        entry = totals.setdefault(scope_id, [0, 0.0])
        entry[0] -= 1
        entry[1] -= length
    vector = capabilities()["vector"]
    rows = []
    postings: list[tuple[int, str, int, float, float]] = []
    for pk, (scope_id, bag, own, blob, model_id) in documents.items():
        length = float(np.float32(sum(bag.values())))
        for term in bag:
            df[(term, scope_id)] += 1
        entry = totals.setdefault(scope_id, [0, 0.0])
        entry[0] += 1
        entry[1] += length
        text, dim = _vector_text(blob, model_id) if vector else (None, None)
        if not text:
            model_id = None
        rows.append(
            (pk, scope_id, length, json.dumps(bag), own, model_id, dim)
            + ((text,) if vector else ())
        )
        for term, tf in bag.items():
            if len(term.encode()) <= MAX_POSTING_TERM_BYTES:
                postings.append((pk, term, scope_id, float(tf), length))
    gone = [pk for pk in ids if pk not in documents]
    if gone:
        cursor.execute(f"DELETE FROM {table} WHERE id = ANY(%s)", [gone])
    if rows:
        columns = "id, scope_id, length, bag, own, model, dim" + (", embedding" if vector else "")
        values = "%s, %s, %s, %s::jsonb, %s, %s, %s" + (", %s::vector" if vector else "")
        updates = ", ".join(f"{column} = EXCLUDED.{column}" for column in columns.split(", ")[1:])
        cursor.executemany(
            f"INSERT INTO {table} ({columns}) VALUES ({values}) "
            f"ON CONFLICT (id) DO UPDATE SET {updates}",
            rows,
        )
    if stored:
        # Only a stored document has postings (but for drift, which the reindex repair rewrites):
        # a bulk import deletes nothing, and never makes a planner without statistics yet scan the
        # growing postings for its ids.
        cursor.execute(f"DELETE FROM {POSTINGS} WHERE kind = %s AND id = ANY(%s)", [kind, stored])
    if postings:
        cursor.execute(
            f"INSERT INTO {POSTINGS} (kind, id, term, scope_id, tf, length) "
            "SELECT %s, * FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::float8[], "
            "%s::real[]) ON CONFLICT (kind, id, term) DO UPDATE SET scope_id = EXCLUDED.scope_id, "
            "tf = EXCLUDED.tf, length = EXCLUDED.length",
            [kind, *map(list, zip(*postings, strict=True))],
        )
    changes = [(term, scope_id, delta) for (term, scope_id), delta in df.items() if delta]
    if changes:
        cursor.execute(
            f"INSERT INTO {DF} (kind, term, scope_id, df) "
            "SELECT %s, term, scope_id, delta FROM unnest(%s::text[], %s::bigint[], %s::int[]) "
            "AS change(term, scope_id, delta) "
            "ON CONFLICT (kind, term, scope_id) DO UPDATE SET df = tideline_search_df.df + "
            "EXCLUDED.df",
            [kind, *map(list, zip(*changes, strict=True))],
        )
    if totals:
        cursor.execute(
            f"INSERT INTO {TOTALS} (kind, scope_id, docs, length) "
            "SELECT %s, scope_id, docs, length FROM unnest(%s::bigint[], %s::bigint[], "
            "%s::float8[]) AS change(scope_id, docs, length) "
            "ON CONFLICT (kind, scope_id) DO UPDATE SET docs = tideline_search_totals.docs + "
            "EXCLUDED.docs, length = tideline_search_totals.length + EXCLUDED.length",
            [
                kind,
                list(totals),
                [entry[0] for entry in totals.values()],
                [entry[1] for entry in totals.values()],
            ],
        )
    named = sorted((scope_id, term) for scope_id, terms in speakers.items() for term in terms)
    if named:
        cursor.execute(
            f"INSERT INTO {SPEAKERS} (scope_id, term) SELECT * FROM unnest(%s::bigint[], "
            "%s::text[]) ON CONFLICT DO NOTHING",
            list(map(list, zip(*named, strict=True))),
        )
    if vector:
        for dim in {dim for *_, dim, _ in rows if dim}:
            _hnsw_ensure(cursor, kind, dim)


def _hnsw_ensure(cursor, kind: str, dim: int) -> None:
    """An HNSW cosine index over this dimension's vectors (a `vector` column holds any dimension;
    an index needs one)."""
    table = DOC_TABLES[kind]
    name = f"{table}_hnsw_{dim}"
    cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", [name])
    if cursor.fetchone() is None:
        cursor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING hnsw "
            f"((embedding::vector({dim})) vector_cosine_ops) WHERE dim = {dim}"
        )


# --- the per-process handle and the per-query view ---------------------------------------------


class VectorIndex(SearchIndex):
    """The fallback without pgvector: this process's matrix of every vector (and its scope), no
    terms."""

    documents_hold_neighbours = False

    def _load(self, ids: list[int]) -> None:
        for pk, scope_id, blob, model_id in self.model.objects.filter(pk__in=ids).values_list(
            "pk", "scope_id", "embedding", "embedding_model"
        ):
            self._add(pk, {"scope": scope_id}, {}, self._vector(blob, model_id))


class MemoryVectorIndex(VectorIndex):
    kind = "memory"
    model = Memory


class TurnVectorIndex(VectorIndex):
    kind = "turn"
    model = ContextTurn


_vector_indexes: dict[str, VectorIndex] = {}
_vector_lock = threading.Lock()


def _vector_index(
    kind: str, model_id: str | None, dim: int, *, refresh: bool = True
) -> VectorIndex:
    """This process's fallback matrix; `refresh=False` when the search already refreshed it
    (NativeSearch.refresh), so a query probes the change log once."""
    with _vector_lock:
        index = _vector_indexes.get(kind)
        if index is None or index.model_id != model_id or index.dim != dim:
            index = (MemoryVectorIndex if kind == "memory" else TurnVectorIndex)(
                model_id=model_id, dim=dim
            )
            _vector_indexes[kind] = index
            refresh = True
    if refresh:
        index.refresh()
    return index


class NativeSearch:
    """What `search_index` returns in native mode: no corpus, only what a query needs to embed
    itself; `narrow` builds the query's candidate view."""

    def __init__(self, *, kind: str, model_id: str | None, dim: int) -> None:
        self.kind = kind
        self.model_id = model_id
        self.dim = dim

    def refresh(self) -> None:
        # The pending queue is checked by the view's first statement (native_view), not here.
        if self.model_id is not None and self.dim and not capabilities()["vector"]:
            _vector_index(self.kind, self.model_id, self.dim)

    def narrow(
        self,
        *,
        query: str,
        scope_ids: list[int],
        vector: np.ndarray | None,
        extra_terms: Sequence[str] = (),
        exclude_secret: bool = False,
    ):
        return native_view(
            kind=self.kind,
            query=query,
            scope_ids=scope_ids,
            vector=vector,
            extra_terms=extra_terms,
            model_id=self.model_id,
            dim=self.dim,
            exclude_secret=exclude_secret,
        )


def _terms_resolve(terms: list[str], df: Counter, speakers: set[str]) -> list[str]:
    """The in-process index's reading of a misspelt speaker name (see SearchIndex.terms_resolve),
    against the terms the caller's visible documents hold (`df`)."""
    if not speakers:
        return terms
    return [
        term
        if df[term] > 0 or len(term) < 4
        else next((name for name in sorted(speakers) if _one_edit_apart(term, name)), term)
        for term in terms
    ]


def _stats(
    cursor,
    *,
    kind: str,
    asked: list[str],
    query_terms: list[str],
    scope_ids: list[int],
    pgvector: bool,
    exclude_secret: bool = False,
) -> tuple[int, float, Counter, set[str], dict[int, str], list[int], bool]:
    """Everything a view needs before its rows, in one statement: the scope set's documents and
    summed length, the document frequency of each asked term (and of each speaker's name of a
    similar length, for reading a misspelt name), the names among them of who spoke in the
    scopes, the scope labels, the secret documents withheld and whether writes are still queued.
    With `exclude_secret`, secret memories are taken out of the statistics and their ids are
    returned, so that they take no candidate's place either, as the in-process index leaves them
    out: a caller who may not see them must not read their words off the scores or the rows. With
    pgvector it also sets the HNSW scan parameters for the session, so the candidate statement
    needs no transaction of its own."""
    hidden = kind == "memory" and exclude_secret
    params: list = [scope_ids] if hidden else []
    params += [kind, scope_ids, kind, scope_ids]
    speaker_select = "NULL::text[]"
    speaker_terms = ""
    if kind == "turn":
        low = min((len(term) for term in query_terms), default=0) - 1
        high = max((len(term) for term in query_terms), default=0) + 1
        # The asked words that are a name are wanted too: a name never expands or is expanded.
        speaker_select = (
            f"(SELECT array_agg(DISTINCT term) FROM {SPEAKERS} WHERE scope_id = ANY(%s) "
            "AND (length(term) BETWEEN %s AND %s OR term = ANY(%s)))"
        )
        speaker_terms = (
            f" OR term IN (SELECT term FROM {SPEAKERS} WHERE scope_id = ANY(%s) "
            "AND length(term) BETWEEN %s AND %s)"
        )
        params += [scope_ids, low, high, asked]
    params += [kind, scope_ids, asked]
    if speaker_terms:
        params += [scope_ids, low, high]
    params += [kind, scope_ids]
    secret_columns = "NULL, NULL"
    if hidden:
        secret_columns = (
            "(SELECT json_build_array(count(*), coalesce(sum(length), 0)::float8, "
            "coalesce(json_agg(id), '[]')) FROM hidden), "
            "(SELECT json_agg(json_build_array(term, n)) FROM (SELECT term, count(*) AS n "
            "FROM hidden, unnest(%s::text[]) AS term WHERE jsonb_exists(bag, term) "
            "GROUP BY term) AS held)"
        )
        params.append(asked)
    hnsw = "NULL"
    if pgvector:
        hnsw = (
            "set_config('hnsw.iterative_scan', 'relaxed_order', false) || "
            "set_config('hnsw.ef_search', %s, false)"
        )
        count = settings.TIDELINE_SEARCH_POSTGRES_SEMANTIC_CANDIDATES
        params.append(str(max(40, min(1000, count))))
    # The secret documents counted in the scopes' statistics (few; memory_secret_scope indexes them).
    with_hidden = (
        f"WITH hidden AS (SELECT d.id, d.length, d.bag FROM {DOC_TABLES['memory']} d "
        f"JOIN {SOURCE_TABLES['memory']} m ON m.id = d.id "
        "WHERE m.secret AND d.scope_id = ANY(%s)) "
        if hidden
        else ""
    )
    cursor.execute(
        f"{with_hidden}SELECT (SELECT coalesce(sum(docs), 0) FROM {TOTALS} "
        "WHERE kind = %s AND scope_id = ANY(%s)), "
        f"(SELECT coalesce(sum(length), 0)::float8 FROM {TOTALS} "
        "WHERE kind = %s AND scope_id = ANY(%s)), "
        f"{speaker_select}, "
        "(SELECT json_agg(json_build_array(term, n)) FROM (SELECT term, sum(df) AS n "
        f"FROM {DF} WHERE kind = %s AND scope_id = ANY(%s) AND df > 0 "
        f"AND (term = ANY(%s){speaker_terms}) GROUP BY term) AS asked), "
        f"EXISTS (SELECT 1 FROM {PENDING} WHERE kind = %s), "
        f"(SELECT json_agg(json_build_array(id, label)) FROM {Scope._meta.db_table} "
        f"WHERE id = ANY(%s)), {secret_columns}, {hnsw}",
        params,
    )
    total, summed, speakers, found, pending, labels, secrets, secret_df, _ = cursor.fetchone()
    df: Counter = Counter({term: int(count) for term, count in found or []})
    withheld: list[int] = []
    if secrets:
        total -= secrets[0]
        summed -= secrets[1]
        withheld = sorted(secrets[2])
        df.subtract({term: int(count) for term, count in secret_df or []})
    return (
        int(total),
        float(summed),
        +df,
        set(speakers or []),
        {int(pk): label for pk, label in labels or []},
        withheld,
        bool(pending),
    )


def _search_apply(kind: str) -> int:
    """What a search applies of a non-empty queue: the rows its own open transaction queued
    (nobody else can), then at most SEARCH_APPLY_LIMIT committed rows — writes apply their own
    rows before committing, so a committed backlog is only what bypassed this connection class
    (another client, a restore); it is drained by the beat's search-queue-drain
    task (native_queue_drain), not by searches."""
    if connection.in_atomic_block:
        # Inside a transaction only what it queued itself, and only if no applier is busy: the
        # apply lock is then held to the transaction's end, and one taken while not writing
        # could close a cycle with a writer committing behind it.
        if getattr(connection, "search_queued", False):
            return native_apply_own(connection, wait=False)
        return 0
    return native_sync(kind, limit=SEARCH_APPLY_LIMIT)


def _like(literal: str) -> str:
    return "%" + connection.ops.prep_for_like_query(literal) + "%"


def native_view(
    *,
    kind: str,
    query: str,
    scope_ids: list[int],
    vector: np.ndarray | None,
    model_id: str | None,
    dim: int,
    extra_terms: Sequence[str] = (),
    exclude_secret: bool = False,
) -> SearchIndex:
    """The candidate rows for `query` in `scope_ids`, as an index the ranking code reads, with the
    postings and document frequencies of `extra_terms` (a query's expansion words) as well, and
    statistics without secret memories with `exclude_secret`.

    Two statements: the collection statistics (`_stats`), then the candidates and their rows in
    one statement with a CTE per candidate source. The rows carry what the ranking would otherwise
    read one query at a time: which rows hold each term-less literal (ILIKE) and the raw text of
    every row a literal may match, for verbatim verification."""
    table = DOC_TABLES[kind]
    query_terms = text_terms(query)
    literals = query_literals(query)
    literal_lists = [text_terms(literal) for literal in literals]
    literal_terms = [term for terms in literal_lists for term in terms]
    bare = list(
        dict.fromkeys(
            literal for literal, terms in zip(literals, literal_lists, strict=True) if not terms
        )
    )
    pgvector = capabilities()["vector"] and vector is not None and bool(dim)
    asked = list(dict.fromkeys(query_terms + literal_terms + list(extra_terms)))
    with connection.cursor() as cursor:
        read_stats = partial(
            _stats,
            cursor,
            kind=kind,
            asked=asked,
            query_terms=query_terms,
            scope_ids=scope_ids,
            pgvector=pgvector,
            exclude_secret=exclude_secret,
        )
        stats = read_stats()
        if stats[-1] and _search_apply(kind):
            stats = read_stats()
        total, summed, df, speakers, labels, withheld, _ = stats
        terms = _terms_resolve(query_terms, df, speakers)
        lookup = list(dict.fromkeys(terms + literal_terms + list(extra_terms)))
        average = summed / total if total else 0.0
        exact = total <= settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS
        cosines: dict[int, float] = {}
        ctes: list[str] = []
        sources: list[str] = []
        cte_params: list = []
        if not exact:
            lexical = _lexical_candidates(
                kind,
                terms,
                scope_ids,
                df=df,
                total=total,
                average=average,
                b=getattr(settings, (TurnIndex if kind == "turn" else MemoryIndex).bm25_b_setting),
                withheld=withheld,
            )
            if lexical is not None:
                ctes.append(f"lexical AS ({lexical[0]})")
                sources.append("SELECT id FROM lexical")
                cte_params += lexical[1]
            source_table, text_column = (
                ("memory_memory", "search_text")
                if kind == "memory"
                else ("memory_contextturn", "content")
            )
            for position, literal in enumerate(bare):
                ctes.append(
                    f"literal_{position} AS (SELECT id FROM {source_table} "
                    f"WHERE scope_id = ANY(%s) AND id {NOT_WITHHELD} AND {text_column} ILIKE %s "
                    "ORDER BY id LIMIT %s)"
                )
                sources.append(f"SELECT id FROM literal_{position}")
                cte_params += [
                    scope_ids,
                    withheld,
                    _like(literal),
                    settings.TIDELINE_SEARCH_POSTGRES_LEXICAL_CANDIDATES,
                ]
            if vector is not None and dim:
                if pgvector:
                    count = settings.TIDELINE_SEARCH_POSTGRES_SEMANTIC_CANDIDATES
                    # The nearest documents by cosine (HNSW), and the farthest: the nearest to the
                    # negated query, so the semantic share's min-max scale sees the same extremes
                    # as a full scan.
                    for name, probe, limit in (("near", vector, count), ("far", -vector, FARTHEST)):
                        ctes.append(
                            f"{name} AS (SELECT id FROM {table} WHERE dim = %s AND model = %s "
                            f"AND scope_id = ANY(%s) AND id {NOT_WITHHELD} "
                            f"ORDER BY embedding::vector({dim}) <=> %s::vector({dim}) LIMIT %s)"
                        )
                        sources.append(f"SELECT id FROM {name}")
                        cte_params += [
                            dim,
                            model_id,
                            scope_ids,
                            withheld,
                            _vector_literal(probe),
                            limit,
                        ]
                else:
                    found = _matrix_candidates(kind, vector, scope_ids, model_id, dim, withheld)
                    cosines.update(found)
                    if found:
                        ctes.append("matrix AS (SELECT unnest(%s::bigint[]) AS id)")
                        sources.append("SELECT id FROM matrix")
                        cte_params.append(sorted(found))
        owns = literal_terms if kind == "turn" else []
        columns = [
            "d.id",
            "s.scope_id",
            "d.length",
            "ARRAY[" + ", ".join(["(d.bag ->> %s)::float8"] * len(lookup)) + "]::float8[]",
            "ARRAY[" + ", ".join(["d.own @> ARRAY[%s]::text[]"] * len(owns)) + "]::boolean[]",
            "NULL",
        ]
        params: list = [*lookup, *owns]
        if pgvector:
            columns[5] = (
                f"CASE WHEN d.model = %s AND d.dim = %s THEN -(d.embedding::vector({dim}) <#> "
                f"%s::vector({dim})) END"
            )
            params += [model_id, dim, _vector_literal(vector)]
        text_column = "s.search_text" if kind == "memory" else "s.content"
        columns.append(
            "ARRAY[" + ", ".join([f"{text_column} ILIKE %s"] * len(bare)) + "]::boolean[]"
        )
        params += [_like(literal) for literal in bare]
        # A row's raw text is fetched when some literal may match it (a term-less literal's ILIKE,
        # or every term of the literal in its document): those are the rows verified verbatim.
        provisional = [f"{text_column} ILIKE %s" for _ in bare]
        params_provisional: list = [_like(literal) for literal in bare]
        for terms_of in literal_lists:
            if terms_of:
                provisional.append(
                    "jsonb_exists_all(d.bag, %s::text[])"
                    if kind == "memory"
                    else "d.own @> %s::text[]"
                )
                params_provisional.append(list(dict.fromkeys(terms_of)))
        columns.append(
            f"CASE WHEN {' OR '.join(provisional)} THEN coalesce({text_column}, '') END"
            if provisional
            else "NULL"
        )
        params += params_provisional
        # The filter columns are read live from the stored rows, epochs as floats. A view serves one
        # query, and a pattern over every candidate's text costs about 8 µs a row here, so a flag
        # is computed only when this query's priors read it (memory/search/intent.py).
        text = "s.search_text" if kind == "memory" else "s.content"
        number, place, when = asks_for_number(query), asks_for_place(query), asks_when(query)
        answer_columns = [
            f"coalesce({text} ~* %s, false)" if number else "false",
            f"coalesce({text} ~ %s, false)" if place else "false",
        ]
        answer_params = ([STATES_NUMBER] if number else []) + ([NAMES_PROPER] if place else [])
        if kind == "memory":
            columns += [
                "s.status",
                "s.memory_type",
                "n.layer",
                "extract(epoch FROM s.valid_from)::float8",
                "extract(epoch FROM s.valid_to)::float8",
                "extract(epoch FROM s.recorded_at)::float8",
                "s.pinned",
                "n.weight",
                "s.secret",
                "s.importance",
                "n.emotion_intensity",
                "coalesce(successor.valid_from <= s.valid_from, false)",
                # A memory's document bag holds its own terms only (a turn's also its neighbours').
                "d.bag ?| %s::text[]" if when else "false",
                *answer_columns,
            ]
            params += ([sorted(time_terms())] if when else []) + answer_params
            joins = (
                "JOIN memory_memory s ON s.id = d.id "
                "LEFT JOIN memory_narrative n ON n.memory_ptr_id = d.id "
                "LEFT JOIN memory_memory successor ON successor.id = s.superseded_by_id"
            )
        else:
            columns += [
                "s.session_id",
                "s.seq",
                "extract(epoch FROM s.occurred_at)::float8",
                "d.own && %s::text[]",
                "s.speaker",
                "coalesce(s.content ~ %s, false)",
                *answer_columns,
                "coalesce(cardinality(d.own), 0)",
            ]
            params += [sorted(time_terms()), QUESTION_END, *answer_params]
            joins = "JOIN memory_contextturn s ON s.id = d.id"
        select = f"SELECT {', '.join(columns)} FROM {table} d {joins}"
        if exact:
            cursor.execute(
                f"{select} WHERE d.scope_id = ANY(%s) ORDER BY d.id", [*params, scope_ids]
            )
            rows = cursor.fetchall()
        elif sources:
            with_clause = f"WITH {', '.join(ctes)} " if ctes else ""
            cursor.execute(
                # An array of ids, not a join: the planner then reads each row by primary key
                # instead of hashing whole tables on a misestimated candidate count.
                f"{with_clause}{select} WHERE d.id = ANY(ARRAY({' UNION '.join(sources)})) "
                "ORDER BY d.id",
                [*cte_params, *params],
            )
            rows = cursor.fetchall()
        else:
            rows = []
    if vector is not None and dim and not pgvector:
        # Without pgvector the matrix gave cosines to its nearest and farthest rows only; a row
        # found by its words or a literal is scored by its cosine too, as the full scan scores it.
        unscored = [row[0] for row in rows if row[0] not in cosines]
        cosines.update(_matrix_cosines(kind, vector, unscored, model_id, dim))
    view_class = MemoryView if kind == "memory" else TurnView
    return view_class(
        model_id=model_id,
        dim=dim,
        rows=rows,
        lookup=lookup,
        literal_terms=owns,
        bare_literals=bare,
        cosines=cosines,
        total=total,
        average=average,
        df=df,
        speakers=speakers,
        labels=labels,
    )


def _vector_literal(vector: np.ndarray) -> str:
    return "[" + ",".join(map(str, np.asarray(vector, dtype=np.float32).tolist())) + "]"


def _lexical_candidates(
    kind: str,
    terms: list[str],
    scope_ids: list[int],
    *,
    df,
    total: int,
    average: float,
    b: float,
    withheld: list[int],
) -> tuple[str, list] | None:
    """The statement (and its parameters) choosing the best
    TIDELINE_SEARCH_POSTGRES_LEXICAL_CANDIDATES documents by BM25, computed in SQL over the term
    postings with the same formula and statistics as the ranking, never one of `withheld` (the
    secrets a caller may not see); None when no query term is stored.

    A term in more than COMMON_DF_SHARE of the documents (the "tl" of every ticket id tl-N) has
    that many postings to add up; when the query's rarer terms already find documents and the
    common terms together can add at most NEGLIGIBLE_SHARE of the best score, only the documents
    holding a rare term are scored (by every term, through their own postings). Both statements
    are in one; the one not needed is cut by a one-time filter before it runs."""
    unique = [
        term
        for term in dict.fromkeys(terms)
        if df.get(term) and len(term.encode()) <= MAX_POSTING_TERM_BYTES
    ]
    if not unique:
        return None
    k1 = settings.TIDELINE_SEARCH_BM25_K1
    idf = {term: float(np.log(1 + (total - df[term] + 0.5) / (df[term] + 0.5))) for term in unique}
    weights = "unnest(%s::text[], %s::float8[]) AS q(term, idf)"
    weight_params = [unique, [idf[term] for term in unique]]
    score = "sum(q.idf * p.tf * %s / (p.tf + %s * (1 - %s + %s * p.length / %s)))"
    score_params = [k1 + 1, k1, b, b, average or 1.0]
    cap = settings.TIDELINE_SEARCH_POSTGRES_LEXICAL_CANDIDATES
    every_sql = (
        f"SELECT p.id, {score} AS score FROM {POSTINGS} p JOIN {weights} ON q.term = p.term "
        f"WHERE p.kind = %s AND p.scope_id = ANY(%s) AND p.id {NOT_WITHHELD} GROUP BY p.id "
        "ORDER BY score DESC, p.id LIMIT %s"
    )
    every_params = [*score_params, *weight_params, kind, scope_ids, withheld, cap]
    rare = [term for term in unique if df[term] <= COMMON_DF_SHARE * total]
    common = [term for term in unique if term not in rare]
    if not (rare and common):
        return f"SELECT id FROM ({every_sql}) AS scored", every_params
    bound = sum(idf[term] * (k1 + 1) for term in common)
    if bound > NEGLIGIBLE_SHARE * sum(idf[term] * (k1 + 1) for term in rare):
        # No rare-term score can reach bound / NEGLIGIBLE_SHARE (a term adds at most
        # idf · (k1 + 1)): the common terms count, so only the statement over every term is run.
        return f"SELECT id FROM ({every_sql}) AS scored", every_params
    rare_sql = (
        f"SELECT r.id, s.score FROM (SELECT DISTINCT id FROM {POSTINGS} WHERE kind = %s "
        f"AND term = ANY(%s) AND scope_id = ANY(%s) AND id {NOT_WITHHELD}) AS r "
        f"CROSS JOIN LATERAL (SELECT {score} AS score FROM {POSTINGS} p JOIN {weights} "
        "ON q.term = p.term WHERE p.kind = %s AND p.id = r.id) AS s "
        "ORDER BY s.score DESC, r.id LIMIT %s"
    )
    rare_params = [kind, rare, scope_ids, withheld, *score_params, *weight_params, kind, cap]
    enough = "(SELECT %s <= %s * max(score) FROM rare)"
    return (
        f"WITH rare AS ({rare_sql}) SELECT id FROM rare WHERE coalesce({enough}, false) "
        f"UNION ALL SELECT id FROM ({every_sql}) AS scored WHERE NOT coalesce({enough}, false)",
        [*rare_params, bound, NEGLIGIBLE_SHARE, *every_params, bound, NEGLIGIBLE_SHARE],
    )


def _matrix_rows(index: VectorIndex, scope_ids: list[int]) -> np.ndarray:
    table = index.table
    mask = table["alive"] & table["has_vector"]
    scopes = np.zeros(table.size, dtype=bool)
    for scope_id in set(scope_ids):
        scopes |= table["scope"] == scope_id
    return np.flatnonzero(mask & scopes)


def _matrix_candidates(
    kind: str,
    vector: np.ndarray,
    scope_ids: list[int],
    model_id: str | None,
    dim: int,
    withheld: list[int],
) -> dict[int, float]:
    """The fallback's nearest and farthest rows with their exact cosines, never one of
    `withheld`."""
    index = _vector_index(kind, model_id, dim, refresh=False)
    with index.lock:
        rows = _matrix_rows(index, scope_ids)
        rows = rows[~np.isin(index.table["id"][rows], withheld)]
        if not len(rows):
            return {}
        cosine, _ = index.cosines(vector)
        cosine = cosine[rows]
        count = min(len(rows), settings.TIDELINE_SEARCH_POSTGRES_SEMANTIC_CANDIDATES)
        near = rows[np.argpartition(-cosine, count - 1)[:count]]
        far = rows[np.argpartition(cosine, min(len(rows), FARTHEST) - 1)[:FARTHEST]]
        chosen = np.union1d(near, far)
        exact = index.exact_cosines(vector, chosen)
        return dict(zip(index.table["id"][chosen].tolist(), exact.tolist(), strict=True))


def _matrix_cosines(
    kind: str, vector: np.ndarray, ids: list[int], model_id: str | None, dim: int
) -> dict[int, float]:
    index = _vector_index(kind, model_id, dim, refresh=False)
    with index.lock:
        rows = [index.row_of[pk] for pk in ids if pk in index.row_of]
        rows = np.asarray([row for row in rows if index.table["has_vector"][row]], dtype=np.int64)
        if not len(rows):
            return {}
        exact = index.exact_cosines(vector, rows)
        return dict(zip(index.table["id"][rows].tolist(), exact.tolist(), strict=True))


class _View:
    """A candidate view: the ranking code's index interface over a few rows, with BM25's
    collection statistics those of the caller's whole scope set."""

    def __init__(
        self,
        *,
        model_id,
        dim,
        rows,
        lookup,
        literal_terms,
        bare_literals,
        cosines,
        total,
        average,
        df,
        speakers,
        labels,
    ) -> None:
        super().__init__(model_id=model_id, dim=dim)
        self.loaded = True
        self.total = total
        self.average = average
        self.df = df
        # The names of who spoke in the view's scopes that the query could be asking about.
        self.speakers = speakers
        self.held_labels = labels
        self.held_literals = {
            literal: {row[0] for row in rows if row[6][position]}
            for position, literal in enumerate(bare_literals)
        }
        self.held_texts = {row[0]: text_compared(row[7]) for row in rows if row[7] is not None}
        self._fill(rows, lookup, literal_terms, cosines)

    def _reset(self) -> None:
        super()._reset()
        # No vectors are held: cosines come from the database (or the fallback matrix).
        self.table = _Columns(self.table.spec, 0)

    def _fill(self, rows, lookup, literal_terms, cosines) -> None:
        size = len(rows)
        table = self.table
        table._grow(max(size, 1))
        table.size = size
        ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=size)
        table.data["id"][:size] = ids
        table.data["alive"][:size] = True
        table.data["scope"][:size] = [row[1] for row in rows]
        table.data["length"][:size] = [row[2] for row in rows]
        for column, values in self._columns(rows).items():
            table.data[column][:size] = values
        self.row_of = dict(zip(ids.tolist(), range(size), strict=True))
        if lookup:
            # One row per candidate, one column per looked-up term; NaN where the term is absent.
            frequencies = np.array([row[3] for row in rows], dtype=np.float64).reshape(
                size, len(lookup)
            )
            for position, term in enumerate(lookup):
                column = frequencies[:, position]
                held = np.flatnonzero(~np.isnan(column))
                if len(held):
                    self.postings.assign(term, held, column[held].astype(np.float32))
        if self.documents_hold_neighbours and literal_terms:
            owned = np.array([row[4] for row in rows], dtype=bool).reshape(size, len(literal_terms))
            for position, term in enumerate(literal_terms):
                held = np.flatnonzero(owned[:, position])
                if len(held):
                    self.own_postings.assign(term, held, np.ones(len(held), dtype=np.float32))
        stored = [row[5] for row in rows]
        if not cosines:
            cosines = {
                row[0]: cosine
                for row, cosine in zip(rows, stored, strict=True)
                if cosine is not None
            }
        cosine = np.zeros(size, dtype=np.float32)
        for pk, value in cosines.items():
            row = self.row_of.get(pk)
            if row is not None:
                cosine[row] = value
                table.data["has_vector"][row] = True
        self._cosine = cosine

    def refresh(self) -> None:
        return

    def row_vectors(self, rows: np.ndarray) -> np.ndarray:
        # A view holds no vectors: the few a caller asks for are read from their rows.
        ids = self.table["id"][rows].tolist()
        stored = self.model.objects.filter(pk__in=ids).values_list(
            "pk", "embedding", "embedding_model"
        )
        blobs = {pk: self._vector(blob, model) for pk, blob, model in stored}
        vectors = np.zeros((len(ids), self.dim), dtype=np.float32)
        for position, pk in enumerate(ids):
            vector = blobs.get(pk)
            if vector is not None:
                vectors[position] = vector
        return vectors

    def narrow(self, *, query, scope_ids, vector, extra_terms=(), exclude_secret=False):
        return self

    def bm25(self, terms: list[str], eligible: np.ndarray, stats_rows: np.ndarray) -> np.ndarray:
        size = self.table.size
        scores = np.zeros(size, dtype=np.float32)
        if not terms or not self.total:
            return scores
        k1 = settings.TIDELINE_SEARCH_BM25_K1
        b = getattr(settings, self.bm25_b_setting)
        lengths = self.table["length"]
        average = self.average or 1.0
        for term in dict.fromkeys(terms):
            posting = self.postings.get(term)
            df = self.df.get(term, 0)
            if posting is None or df == 0:
                continue
            rows, tfs = posting
            keep = eligible[rows]
            rows, tfs = rows[keep], tfs[keep]
            if not len(rows):
                continue
            idf = np.log(1 + (self.total - df + 0.5) / (df + 0.5))
            norm = k1 * (1 - b + b * lengths[rows] / average)
            scores[rows] += idf * tfs * (k1 + 1) / (tfs + norm)
        return scores

    def ideal_bm25(self, terms: list[str], stats_rows: np.ndarray) -> float:
        ideal = 0.0
        for term in dict.fromkeys(terms):
            df = self.df.get(term, 0)
            if df:
                ideal += float(np.log(1 + (self.total - df + 0.5) / (df + 0.5)))
        return ideal

    def speakers_in(self, scope_ids: list[int]) -> set[str]:
        return self.speakers

    def terms_resolve(
        self, terms: list[str], *, scope_ids: list[int], stats_rows: np.ndarray
    ) -> list[str]:
        return _terms_resolve(terms, self.df, self.speakers)

    def cosines(self, vector: np.ndarray) -> tuple[np.ndarray, bool]:
        return self._cosine.copy(), False

    def exact_cosines(self, vector: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return self._cosine[rows]


def _epochs(values, default: float) -> list[float]:
    return [value if value is not None else default for value in values]


class MemoryView(_View, MemoryIndex):
    def _columns(self, rows) -> dict[str, list]:
        columns = list(zip(*rows, strict=True)) if rows else [()] * 23
        status, memory_type, layer, valid_from, valid_to, recorded_at = columns[8:14]
        pinned, weight, secret, importance, intensity, corrected = columns[14:20]
        return {
            "status": [STATUS_CODES.get(value, -1) for value in status],
            "memory_type": [TYPE_CODES.get(value, -1) for value in memory_type],
            "layer": [LAYER_CODES.get(value, -1) for value in layer],
            "valid_from": _epochs(valid_from, -NO_TIME),
            "valid_to": _epochs(valid_to, NO_TIME),
            "recorded_at": _epochs(recorded_at, 0.0),
            "pinned": list(pinned),
            "weight": memory_weights(
                weight=np.array(weight, dtype=np.float64),
                importance=np.array(importance, dtype=np.float64),
                intensity=np.array(intensity, dtype=np.float64),
            ),
            "secret": list(secret),
            "corrected": list(corrected),
            "mentions_time": list(columns[20]),
            "states_number": list(columns[21]),
            "names_proper": list(columns[22]),
        }


class TurnView(_View, TurnIndex):
    def _columns(self, rows) -> dict[str, list]:
        columns = list(zip(*rows, strict=True)) if rows else [()] * 17
        return {
            "session": list(columns[8]),
            "seq": list(columns[9]),
            "occurred_at": _epochs(columns[10], 0.0),
            "mentions_time": list(columns[11]),
            "speaker": [self.speaker_number(name) for name in columns[12]],
            "asks": list(columns[13]),
            "states_number": list(columns[14]),
            "names_proper": list(columns[15]),
            "own_terms": list(columns[16]),
        }
