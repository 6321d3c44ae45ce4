"""The PostgreSQL-native search backend (memory/search/postgres.py): what it stores, that a process
holds no corpus, and that its candidate views rank exactly as the in-process index does.

On system PostgreSQL 15 this covers pg_trgm and the vector fallback; test_pgvector_server.py runs
this module and the search suite again on PostgreSQL 16 with pgvector (and no pg_trgm).
"""

import gc
import json
import os
from collections import Counter
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from memory.models import ContextTurn, Memory
from memory.search import memory_search, postgres, service, turn_search
from memory.search.index import MemoryIndex, SearchIndex, TurnIndex
from memory.search.text import text_terms
from memory.services.timeline import TurnInput, session_start, turns_record

pytestmark = pytest.mark.django_db

SENTENCES = [
    "Deployed whale-listen to the staging cluster on Friday",
    "The whale listening service keeps a microphone open for whale songs",
    "处理边界条件时先写兜底逻辑",
    "今天把数据库迁移到了新的服务器",
    "The nightly backup of the archive runs at 3 am",
    "We moved the archive database from MySQL to PostgreSQL",
    "Rate limits on the public API are 100 requests per minute",
    "The user prefers neovim for editing code",
    "Dark mode in every tool, the user insists",
    "Retry policy of the crawler: three attempts with backoff",
    "テストの自動化を進めている",
    "El equipo prefiere el despliegue con Docker",
    "ticket tl-4711 tracks the flaky archive export",
    "ticket tl-4712 tracks the slow search page",
]
QUERIES = [
    "whale-listen",
    "whale songs",
    "边界",
    "archive database",
    "backup",
    "tl-4711",
    '"archive export"',
    "what editor does the user like",
    "Docker",
    "テスト",
    "rate limits api",
]


@pytest.fixture
def postgresql(db):
    if connection.vendor != "postgresql":
        pytest.skip("the native backend is PostgreSQL's")
    service._indexes.clear()


def _corpus(scope, write_narrative, django_capture_on_commit_callbacks) -> list[int]:
    now = timezone.now()
    written = [
        write_narrative(scope, text, valid_from=now - timedelta(days=index))
        for index, text in enumerate(SENTENCES)
    ]
    session = session_start(runtime="test", external_id="native", scope_id=scope.pk)
    with django_capture_on_commit_callbacks(execute=True):
        turns_record(
            session_id=session.pk,
            turns=[
                TurnInput(
                    role="user" if index % 2 else "assistant",
                    speaker="Aqib" if index % 2 else "assistant",
                    content=text,
                    occurred_at=datetime(2023, 5, 1 + index, 12, tzinfo=UTC),
                )
                for index, text in enumerate(SENTENCES)
            ],
        )
    return [memory.pk for memory in written]


def _ranked(scope_ids) -> dict:
    found = {}
    for query in [*QUERIES, "what did Akib say about whales"]:
        memories = memory_search(query=query, scope_ids=scope_ids, limit=8)
        turns = turn_search(query=query, scope_ids=scope_ids, limit=8)
        found[query] = (
            [(hit.memory.pk, round(hit.score, 4)) for hit in memories],
            [(hit.turn.pk, round(hit.score, 4)) for hit in turns],
        )
    return found


def test_it_keeps_no_corpus_in_the_process(
    postgresql, project_scope, write_narrative, django_capture_on_commit_callbacks
):
    _corpus(project_scope, write_narrative, django_capture_on_commit_callbacks)
    gc.collect()
    hits = memory_search(query="whale-listen", scope_ids=[project_scope.pk])
    turns = turn_search(query="whale songs", scope_ids=[project_scope.pk])
    assert hits and turns
    assert isinstance(service._indexes["memory"], postgres.NativeSearch)
    assert isinstance(service._indexes["turn"], postgres.NativeSearch)
    # No in-process index of the corpus exists anywhere in this process (views are per query).
    assert not [item for item in gc.get_objects() if type(item) in (MemoryIndex, TurnIndex)]
    if postgres.capabilities()["vector"]:
        assert not postgres._vector_indexes
    else:
        # The documented fallback: vectors only, no terms.
        for index in postgres._vector_indexes.values():
            assert not index.postings._lists


def test_it_stores_the_bm25_statistics_of_every_scope(
    postgresql, project_scope, other_project_scope, write_narrative
):
    first = write_narrative(project_scope, "the archive tool exports whale songs")
    write_narrative(project_scope, "whale songs at night")
    write_narrative(other_project_scope, "the billing service sends invoices")
    postgres.native_sync("memory")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT scope_id, docs, length FROM {postgres.TOTALS} WHERE kind = 'memory'"
        )
        totals = {scope_id: (docs, length) for scope_id, docs, length in cursor.fetchall()}
        cursor.execute(f"SELECT term, scope_id, df FROM {postgres.DF} WHERE kind = 'memory'")
        df = {(term, scope_id): count for term, scope_id, count in cursor.fetchall() if count}
    expected_df: Counter = Counter()
    expected_totals: dict[int, list] = {}
    for memory in Memory.objects.all():
        terms = text_terms(memory.search_text)
        expected_df.update((term, memory.scope_id) for term in set(terms))
        entry = expected_totals.setdefault(memory.scope_id, [0, 0.0])
        entry[0] += 1
        entry[1] += len(terms)
    assert df == dict(expected_df)
    assert {key: (docs, pytest.approx(length)) for key, (docs, length) in totals.items()} == {
        key: (docs, pytest.approx(length)) for key, (docs, length) in expected_totals.items()
    }
    # A changed text moves its document frequencies in the same step.
    Memory.objects.filter(pk=first.pk).update(search_text="invoices for the lighthouse")
    postgres.native_sync("memory")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT term, df FROM {postgres.DF} WHERE kind = 'memory' AND scope_id = %s",
            [project_scope.pk],
        )
        now = dict(cursor.fetchall())
    assert now[text_terms("whale")[0]] == 1
    assert now[text_terms("lighthouse")[0]] == 1


def test_it_ranks_narrowed_candidates_as_the_in_process_index_does(
    postgresql,
    settings,
    project_scope,
    other_project_scope,
    write_narrative,
    write_fact,
    django_capture_on_commit_callbacks,
):
    _corpus(project_scope, write_narrative, django_capture_on_commit_callbacks)
    # Rows whose weight the search prior reads three ways: a fact's importance, a felt
    # narrative's salience, a narrative scored on every dimension.
    write_fact(project_scope, "archive_database", "PostgreSQL for the archive", importance=5)
    write_narrative(project_scope, "The whale songs kept the user awake", emotion_intensity=9.0)
    write_narrative(
        project_scope, "Rate limits of the archive API", importance=1, emotional=5, unresolved=4
    )
    write_narrative(other_project_scope, "whale songs and the archive database, elsewhere")
    scope_ids = [project_scope.pk, other_project_scope.pk]
    settings.TIDELINE_SEARCH_POSTGRES = "process"
    in_process = _ranked(scope_ids)
    settings.TIDELINE_SEARCH_POSTGRES = "native"
    assert _ranked(scope_ids) == in_process
    # Past EXACT_ROWS the view is built from BM25 in SQL, nearest vectors and literal hits.
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = 0
    assert _ranked(scope_ids) == in_process
    assert any(memories for memories, _ in in_process.values())
    assert any(turns for _, turns in in_process.values())


def test_it_finds_a_write_from_another_transaction_at_the_next_search(
    postgresql, project_scope, write_narrative
):
    assert memory_search(query="lighthouse", scope_ids=[project_scope.pk]) == []
    written = write_narrative(project_scope, "the lighthouse keeper logs every ship")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {postgres.PENDING} WHERE kind = 'memory'")
        assert cursor.fetchone()[0] >= 1
    assert memory_search(query="lighthouse", scope_ids=[project_scope.pk])[0].memory.pk == (
        written.pk
    )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {postgres.PENDING} WHERE kind = 'memory'")
        assert cursor.fetchone()[0] == 0


def test_it_serves_literals_through_pg_trgm_when_installed(postgresql, project_scope):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
        available = cursor.fetchone() is not None
        cursor.execute(
            "EXPLAIN SELECT id FROM memory_memory WHERE search_text ILIKE '%%whale-listen%%'"
        )
        plan = " ".join(row[0] for row in cursor.fetchall())
    assert postgres.capabilities()["trigram"] == available
    if available:
        assert "memory_search_text_trgm" in plan or "Seq Scan" in plan
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(
                "EXPLAIN SELECT id FROM memory_memory WHERE search_text ILIKE '%%whale-listen%%'"
            )
            assert "memory_search_text_trgm" in " ".join(row[0] for row in cursor.fetchall())


def test_it_uses_pgvector_where_the_server_has_it(postgresql, project_scope, write_narrative):
    """On a server with the `vector` extension the documents hold pgvector embeddings under an
    HNSW index; TIDELINE_TEST_EXPECT_PGVECTOR=1 (set by test_pgvector_server.py) makes it a must."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        available = cursor.fetchone() is not None
    if os.environ.get("TIDELINE_TEST_EXPECT_PGVECTOR") == "1":
        assert available
    assert postgres.capabilities()["vector"] == available
    target = write_narrative(project_scope, "写代码用 neovim")
    write_narrative(project_scope, "周末去海边散步，天气很好")
    hits = memory_search(query="编辑器是 nvim", scope_ids=[project_scope.pk])
    assert hits[0].memory.pk == target.pk and hits[0].semantic is not None
    if available:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = 'memory_search_doc' "
                "AND indexdef LIKE '%%hnsw%%'"
            )
            assert "vector_cosine_ops" in cursor.fetchone()[0]
        assert not postgres._vector_indexes


@pytest.mark.django_db(transaction=True)
def test_it_forgets_the_documents_of_truncated_rows(postgresql, project_scope):
    """Django's flush between transactional tests truncates the stored rows."""
    session = session_start(runtime="test", external_id="gone", scope_id=project_scope.pk)
    turns = turns_record(
        session_id=session.pk,
        turns=[TurnInput(role="user", content="a turn about lighthouses", speaker="user")],
    )
    postgres.native_sync("turn")
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE memory_contextturn CASCADE")
        cursor.execute("SELECT count(*) FROM turn_search_doc")
        assert cursor.fetchone()[0] == 0
        cursor.execute(f"SELECT count(*) FROM {postgres.DF} WHERE kind = 'turn'")
        assert cursor.fetchone()[0] == 0
        cursor.execute(f"SELECT count(*) FROM {postgres.POSTINGS} WHERE kind = 'turn'")
        assert cursor.fetchone()[0] == 0
    assert not ContextTurn.objects.filter(pk=turns[0].pk).exists()
    assert turn_search(query="lighthouses", scope_ids=[project_scope.pk]) == []


def test_it_adds_nothing_to_sqlite(db):
    if connection.vendor != "sqlite":
        pytest.skip("checks the SQLite schema")
    assert "memory_search_doc" not in connection.introspection.table_names()
    assert isinstance(service.search_index("memory"), SearchIndex)


@pytest.mark.parametrize("exact_rows", [2000, 0])
def test_it_searches_in_few_round_trips(
    postgresql,
    settings,
    exact_rows,
    project_scope,
    write_narrative,
    django_capture_on_commit_callbacks,
):
    """One native search: the collection statistics, the candidates with their rows (one
    statement whatever the candidate sources: BM25, literals, vectors), the returned rows, and the
    fallback matrix's change-log probe where pgvector is missing. Literal verification and scope
    labels come with the view's rows. A turn search also reads the word vectors added since the
    last query (memory/search/expansion.py): one statement."""
    from django.test.utils import CaptureQueriesContext

    _corpus(project_scope, write_narrative, django_capture_on_commit_callbacks)
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = exact_rows
    probe = 0 if postgres.capabilities()["vector"] else 1
    # A term-less literal (ILIKE), a literal with terms (verified verbatim) and plain words.
    query = '"tl-4711" archive export 兜底'
    memory_search(query="warm up", scope_ids=[project_scope.pk])
    turn_search(query="warm up", scope_ids=[project_scope.pk])
    with CaptureQueriesContext(connection) as memories:
        hits = memory_search(query=query, scope_ids=[project_scope.pk])
    with CaptureQueriesContext(connection) as turns:
        found = turn_search(query=query, scope_ids=[project_scope.pk])
    assert "tl-4711" in hits[0].memory.search_text and hits[0].why["scope"]
    assert "tl-4711" in found[0].turn.content
    assert len(memories) == 3 + probe, "\n".join(query["sql"][:150] for query in memories)
    assert len(turns) == 4 + probe, "\n".join(query["sql"][:150] for query in turns)


def _pending(kind: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {postgres.PENDING} WHERE kind = %s", [kind])
        return cursor.fetchone()[0]


def _stored_statistics(kind: str) -> tuple[dict, dict]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT scope_id, docs, length FROM {postgres.TOTALS} WHERE kind = %s", [kind]
        )
        totals = {
            scope_id: (docs, round(length, 3)) for scope_id, docs, length in cursor.fetchall()
        }
        cursor.execute(f"SELECT term, scope_id, df FROM {postgres.DF} WHERE kind = %s", [kind])
        df = {(term, scope_id): count for term, scope_id, count in cursor.fetchall() if count}
    return totals, df


def _memory_statistics() -> tuple[dict, dict]:
    """BM25's statistics as the in-process index computes them from the stored rows."""
    df: Counter = Counter()
    totals: dict[int, list] = {}
    for memory in Memory.objects.all():
        terms = text_terms(memory.search_text)
        df.update((term, memory.scope_id) for term in set(terms))
        entry = totals.setdefault(memory.scope_id, [0, 0.0])
        entry[0] += 1
        entry[1] += len(terms)
    return {key: (docs, round(length, 3)) for key, (docs, length) in totals.items()}, dict(df)


@pytest.mark.django_db(transaction=True)
def test_it_applies_every_write_in_the_writers_own_transaction(
    postgresql, project_scope, other_project_scope, write_narrative
):
    """Committed writes leave nothing queued for a search: documents and statistics commit with
    the rows — a service write, a bulk import in one transaction, an autocommit update."""
    write_narrative(project_scope, "the lighthouse keeper logs every ship")
    session = session_start(runtime="test", external_id="own", scope_id=project_scope.pk)
    turns_record(
        session_id=session.pk,
        turns=[TurnInput(role="user", content="whale songs at night", speaker="Aqib")],
    )
    assert _pending("memory") == 0 and _pending("turn") == 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM turn_search_doc")
        assert cursor.fetchone()[0] == 1
    # A bulk import: one transaction, rows created in bulk (no service, no signal).
    now = timezone.now()
    with transaction.atomic():
        Memory.objects.bulk_create(
            Memory(
                memory_type="narrative",
                scope_id=(project_scope if index % 3 else other_project_scope).pk,
                summary=f"imported note {index}",
                search_text=f"imported note {index} about {SENTENCES[index % len(SENTENCES)]}",
                valid_from=now,
                recorded_at=now,
            )
            for index in range(300)
        )
    assert _pending("memory") == 0
    assert _stored_statistics("memory") == _memory_statistics()
    # An update outside any transaction commits by itself; it is applied right after.
    first = Memory.objects.order_by("pk").first()
    Memory.objects.filter(pk=first.pk).update(search_text="invoices for the harbour master")
    assert _pending("memory") == 0
    assert _stored_statistics("memory") == _memory_statistics()
    # A rolled-back write leaves nothing behind.
    with pytest.raises(RuntimeError), transaction.atomic():
        Memory.objects.filter(pk=first.pk).update(search_text="never committed")
        raise RuntimeError
    assert _pending("memory") == 0
    assert _stored_statistics("memory") == _memory_statistics()
    # Recall's activation counters are not searched: their update costs the commit nothing.
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as recalled:
        hits = memory_search(
            query="harbour master", scope_ids=[project_scope.pk], activation_source="mcp_search"
        )
    assert hits[0].memory.pk == first.pk
    assert Memory.objects.get(pk=first.pk).activation_count == 1
    assert not [query for query in recalled if f"DELETE FROM {postgres.PENDING}" in query["sql"]]


@pytest.mark.django_db(transaction=True)
def test_it_never_makes_a_search_apply_a_backlog(postgresql, project_scope):
    """Rows queued past the write path (another client, a restore): a search applies at most
    SEARCH_APPLY_LIMIT of them; the beat's drain applies the rest."""
    now = timezone.now()
    count = postgres.SEARCH_APPLY_LIMIT + 150
    with transaction.atomic():
        Memory.objects.bulk_create(
            Memory(
                memory_type="narrative",
                scope_id=project_scope.pk,
                summary=f"note {index}",
                search_text=f"backlog note {index}",
                valid_from=now,
                recorded_at=now,
            )
            for index in range(count)
        )
    # Queued by another client (not through this connection class's write path).
    with psycopg.connect(**connection.get_connection_params()) as other:
        other.execute(
            f"INSERT INTO {postgres.PENDING} (kind, row_id) SELECT 'memory', id FROM memory_memory"
        )
    assert _pending("memory") == count
    memory_search(query="backlog note", scope_ids=[project_scope.pk])
    assert _pending("memory") == count - postgres.SEARCH_APPLY_LIMIT
    assert postgres.native_queue_drain() == {"memory": 150, "turn": 0}
    assert _pending("memory") == 0
    assert _stored_statistics("memory") == _memory_statistics()


def _postings(kind: str) -> tuple[set, set]:
    """(what each stored document's term bag says its postings are, the stored postings)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, scope_id, length, bag FROM {postgres.DOC_TABLES[kind]}")
        derived = {
            (pk, term, scope_id, float(tf), length)
            for pk, scope_id, length, bag in cursor.fetchall()
            for term, tf in (json.loads(bag) if isinstance(bag, str) else bag).items()
        }
        cursor.execute(
            f"SELECT id, term, scope_id, tf, length FROM {postgres.POSTINGS} WHERE kind = %s",
            [kind],
        )
        return derived, set(cursor.fetchall())


def test_it_keeps_each_documents_term_postings_with_it(
    postgresql,
    project_scope,
    other_project_scope,
    write_narrative,
    django_capture_on_commit_callbacks,
):
    """Candidates are summed from the postings: a write, an edit, a move to another scope and a
    turn that changes its neighbours' documents all leave exactly the postings of the stored
    documents (rows are never deleted; a truncate's go with its documents)."""
    memory_ids = _corpus(project_scope, write_narrative, django_capture_on_commit_callbacks)
    Memory.objects.filter(pk=memory_ids[0]).update(search_text="invoices for the harbour master")
    Memory.objects.filter(pk=memory_ids[1]).update(scope=other_project_scope)
    session = session_start(runtime="test", external_id="native", scope_id=project_scope.pk)
    with django_capture_on_commit_callbacks(execute=True):
        turns_record(
            session_id=session.pk,
            turns=[TurnInput(role="user", content="the harbour master waves", speaker="Aqib")],
        )
    for kind in postgres.DOC_TABLES:
        postgres.native_sync(kind)
        derived, stored = _postings(kind)
        assert stored == derived and stored
    harbour = text_terms("harbour")[0]
    assert {pk for pk, term, *_ in _postings("memory")[1] if term == harbour} == set(
        Memory.objects.filter(search_text__icontains="harbour").values_list("pk", flat=True)
    )
    assert {scope for pk, _, scope, *_ in _postings("memory")[1] if pk == memory_ids[1]} == {
        other_project_scope.pk
    }


@pytest.mark.django_db(transaction=True)
def test_it_moves_stored_documents_between_tsvector_and_postings(
    postgresql, project_scope, write_narrative, django_capture_on_commit_callbacks
):
    """Migration 0014 turns each document's tsvector into postings, and back when reversed, from
    the stored term bags (no document is recomputed)."""
    _corpus(project_scope, write_narrative, django_capture_on_commit_callbacks)
    for kind in postgres.DOC_TABLES:
        postgres.native_sync(kind)
    before = {kind: _postings(kind)[1] for kind in postgres.DOC_TABLES}
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("memory")
    executor.migrate([("memory", "0013_memory_scope_type_recent")])
    with connection.cursor() as cursor:
        assert postgres.POSTINGS not in connection.introspection.table_names(cursor)
        cursor.execute(
            "SELECT count(*) FROM memory_search_doc WHERE tsv @@ %s::tsquery",
            [text_terms("whale")[0]],
        )
        assert cursor.fetchone()[0] == 2
    executor = MigrationExecutor(connection)
    executor.migrate(latest)
    assert {kind: _postings(kind)[1] for kind in postgres.DOC_TABLES} == before
    assert all(before.values())
    assert memory_search(query="whale songs", scope_ids=[project_scope.pk])


@pytest.mark.django_db(transaction=True)
def test_it_files_speakers_names_under_the_scopes_they_spoke_in_and_back(
    postgresql, project_scope, other_project_scope, django_capture_on_commit_callbacks
):
    """Migration 0019 rebuilds the speakers' names from the stored turns, each under its scope,
    so a query is read against the names of its own scopes; reversed, one list of names again."""
    for scope, speaker in ((project_scope, "Aqib"), (other_project_scope, "Zorro Vega")):
        session = session_start(runtime="test", external_id=speaker, scope_id=scope.pk)
        with django_capture_on_commit_callbacks(execute=True):
            turns_record(
                session_id=session.pk,
                turns=[TurnInput(role="user", content="the ferry is late", speaker=speaker)],
            )
    postgres.native_sync("turn")
    names = {
        (project_scope.pk, *text_terms("Aqib")),
        *((other_project_scope.pk, term) for term in text_terms("Zorro Vega")),
    }

    def stored(columns: str) -> set[tuple]:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {columns} FROM {postgres.SPEAKERS}")
            return set(cursor.fetchall())

    assert stored("scope_id, term") == names
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("memory")
    executor.migrate([("memory", "0018_search_watch_secret")])
    assert stored("term") == {(term,) for _, term in names}
    MigrationExecutor(connection).migrate(latest)
    assert stored("scope_id, term") == names


def test_it_ranks_candidates_found_by_rare_terms_as_the_in_process_index_does(
    postgresql, settings, project_scope, write_narrative
):
    """A ticket id's "tl" is in every row: only the rows holding its number are summed (by every
    query term), and the ranking is the in-process index's."""
    from django.test.utils import CaptureQueriesContext

    for number in range(40):
        write_narrative(project_scope, f"ticket tl-{number} tracks the {SENTENCES[number % 14]}")
    queries = ["tl-7", "ticket tl-12", "tl-33 archive"]
    settings.TIDELINE_SEARCH_POSTGRES = "process"
    in_process = _scored(queries, project_scope)
    settings.TIDELINE_SEARCH_POSTGRES = "native"
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = 0
    with CaptureQueriesContext(connection) as statements:
        native = _scored(queries, project_scope)
    assert native == in_process
    assert all(ranked for ranked in native)
    # Both statements ran: "ticket" is in every row too, but weighs more than NEGLIGIBLE_SHARE.
    rare = [statement for statement in statements if "WITH rare AS" in statement["sql"]]
    assert 0 < len(rare) < len(queries)


def test_it_scores_every_candidate_by_its_cosine_without_pgvector(
    postgresql, settings, project_scope, write_narrative
):
    """Before, without pgvector, a row found by its words but outside the nearest and farthest
    vectors was scored with no cosine at all, below the in-process index's score for it."""
    if postgres.capabilities()["vector"]:
        pytest.skip("with pgvector every candidate's cosine is read in SQL")
    for number in range(120):
        write_narrative(project_scope, f"ticket tl-{number} tracks the {SENTENCES[number % 14]}")
    queries = ["ticket about the archive", "ticket for whale songs"]
    settings.TIDELINE_SEARCH_POSTGRES = "process"
    in_process = _scored(queries, project_scope)
    settings.TIDELINE_SEARCH_POSTGRES = "native"
    settings.TIDELINE_SEARCH_POSTGRES_EXACT_ROWS = 0
    settings.TIDELINE_SEARCH_POSTGRES_SEMANTIC_CANDIDATES = 5

    assert _scored(queries, project_scope) == in_process
    for query in queries:
        hits = memory_search(query=query, scope_ids=[project_scope.pk])
        assert all(hit.semantic is not None for hit in hits)


def _scored(queries: list[str], scope) -> list[list[tuple[int, float]]]:
    return [
        [
            (hit.memory.pk, round(hit.score, 4))
            for hit in memory_search(query=q, scope_ids=[scope.pk])
        ]
        for q in queries
    ]
