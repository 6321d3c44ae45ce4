import importlib
import json
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from memory.models import AuditEvent
from memory.search import memory_search
from memory.search.schema import MEMORY_WORD
from memory.search.text import text_terms
from memory.services.timeline import TurnInput, session_start, turns_record


def test_it_detects_and_repairs_index_drift(project_scope, write_narrative):
    if connection.vendor != "sqlite":
        pytest.skip("the persistent FTS5 index exists on SQLite only")
    target = write_narrative(project_scope, "处理边界条件时先写兜底逻辑")
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {MEMORY_WORD} WHERE rowid = %s", [target.pk])
        cursor.execute(
            f"INSERT INTO {MEMORY_WORD}(rowid, tokens) VALUES (%s, 'stale words')", [987654]
        )
    report = StringIO()
    call_command("reindex", "--check", stdout=report)
    assert "memory  drift found: 1 missing, 1 orphaned, 0 stale" in report.getvalue()

    report = StringIO()
    call_command("reindex", stdout=report)
    assert "memory  repaired: 1 missing, 1 orphaned" in report.getvalue()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tokens FROM {MEMORY_WORD} WHERE rowid = %s", [target.pk])
        assert "边界" in cursor.fetchone()[0].split()
        cursor.execute(f"SELECT count(*) FROM {MEMORY_WORD} WHERE rowid = 987654")
        assert cursor.fetchone()[0] == 0
    assert memory_search(query="边界", scope_ids=[project_scope.pk])[0].memory.pk == target.pk

    report = StringIO()
    call_command("reindex", "--check", stdout=report)
    assert "memory  clean" in report.getvalue()


# Each migration that changes how terms are drawn: a text, the term it now draws and what an older
# release drew instead (None: nothing), and a query that needs the new term.
RETOKENISING_MIGRATIONS = [
    pytest.param(
        "0016_search_terms_irregular_forms",
        "Bought two ceramic figurines at the flea market",
        "buy",
        "bought",
        "buy figurines",
        id="irregular-forms",
    ),
    pytest.param(
        "0017_search_terms_months",
        "2024年1月7日在跳蚤市场买了两个陶瓷小雕像",
        "januari",
        None,
        "figurines bought in January",
        id="months",
    ),
    pytest.param(
        "0020_search_terms_accents_and_format_characters",
        "La reunión trimestral se mueve al jueves",
        "reunion",
        "reunión",
        "reunion",
        id="accents",
    ),
    pytest.param(
        "0021_search_terms_han_folding_and_kanji_words",
        "我們下個月在臺灣開會",
        "台湾",
        "臺灣",
        "台湾",
        id="han-folding",
    ),
    pytest.param(
        "0021_search_terms_han_folding_and_kanji_words",
        "来週の月曜日に新幹線で大阪へ行きます",
        "新干线",
        None,
        "新幹線",
        id="kanji-words",
    ),
    pytest.param(
        "0024_search_terms_unknown_chinese_word_pairs",
        "用户的女朋友林雨桐对海鲜过敏",
        "雨桐",
        None,
        "雨桐",
        id="unknown-word-pairs",
    ),
]


def _drawn_before(text: str, term: str, before: str | None) -> list[str]:
    return [
        before if drawn == term else drawn for drawn in text_terms(text) if drawn != term or before
    ]


def _migrate(migration: str) -> None:
    """Run what the migration runs (its RunPython step), against the test database as it is."""
    module = importlib.import_module(f"memory.migrations.{migration}")
    for operation in module.Migration.operations:
        operation.code(apps=None, schema_editor=None)


def _lexical_hits(scope, query: str, term: str) -> list[tuple[int, bool]]:
    """(memory, whether `term` is among its matched terms) of a keyword-only search."""
    hits = memory_search(query=query, scope_ids=[scope.pk], semantic=False)
    return [(hit.memory.pk, term in hit.why["matched_terms"]) for hit in hits]


@pytest.mark.parametrize(("migration", "text", "term", "before", "query"), RETOKENISING_MIGRATIONS)
def test_it_rewrites_terms_drawn_by_an_older_release_when_migrating(
    project_scope, write_narrative, migration, text, term, before, query
):
    if connection.vendor != "sqlite":
        pytest.skip("the persistent FTS5 index exists on SQLite only")
    memory = write_narrative(project_scope, text)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {MEMORY_WORD} SET tokens = %s WHERE rowid = %s",
            [" ".join(_drawn_before(text, term, before)), memory.pk],
        )

    assert _lexical_hits(project_scope, query, term) in ([], [(memory.pk, False)])

    _migrate(migration)

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tokens FROM {MEMORY_WORD} WHERE rowid = %s", [memory.pk])
        assert cursor.fetchone()[0].split() == text_terms(text)
    assert _lexical_hits(project_scope, query, term) == [(memory.pk, True)]


@pytest.mark.parametrize(("migration", "text", "term", "before", "query"), RETOKENISING_MIGRATIONS)
def test_it_rewrites_postgresqls_stored_terms_drawn_by_an_older_release_when_migrating(
    project_scope, write_narrative, migration, text, term, before, query
):
    from memory.search import postgres

    if not postgres.native_active():
        pytest.skip("stored search documents are PostgreSQL's native backend")
    memory = write_narrative(project_scope, text)
    postgres.native_sync("memory")
    with connection.cursor() as cursor:
        count = text_terms(text).count(term)
        cursor.execute(
            f"UPDATE {postgres.DOC_TABLES['memory']} SET bag = (bag - %s) || %s::jsonb "
            "WHERE id = %s",
            [term, json.dumps({before: count} if before else {}), memory.pk],
        )
        if before:
            cursor.execute(
                f"UPDATE {postgres.POSTINGS} SET term = %s "
                "WHERE kind = 'memory' AND id = %s AND term = %s",
                [before, memory.pk, term],
            )
        else:
            cursor.execute(
                f"DELETE FROM {postgres.POSTINGS} WHERE kind = 'memory' AND id = %s AND term = %s",
                [memory.pk, term],
            )

    assert _lexical_hits(project_scope, query, term) in ([], [(memory.pk, False)])

    _migrate(migration)

    assert _lexical_hits(project_scope, query, term) == [(memory.pk, True)]
    assert postgres.native_statistics_drift("memory") == 0


def _native_documents(project_scope, write_narrative, django_capture_on_commit_callbacks):
    from memory.search import postgres

    if not postgres.native_active():
        pytest.skip("stored search documents are PostgreSQL's native backend")
    write_narrative(project_scope, "the nightly backup of the archive runs at 3 am")
    dropped = write_narrative(project_scope, "处理边界条件时先写兜底逻辑")
    session = session_start(runtime="test", external_id="reindex", scope_id=project_scope.pk)
    with django_capture_on_commit_callbacks(execute=True):
        turns = turns_record(
            session_id=session.pk,
            turns=[
                TurnInput(
                    role="user",
                    speaker="Ann",
                    content=text,
                    occurred_at=datetime(2024, 1, 7, tzinfo=UTC),
                )
                for text in ["we baked bread", "the oven broke", "a new oven came on Monday"]
            ],
        )
    for kind in postgres.DOC_TABLES:
        postgres.native_sync(kind)
    return dropped, turns


def _stored(kind: str) -> dict[int, tuple]:
    from memory.search import postgres

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, scope_id, length, bag, own FROM {postgres.DOC_TABLES[kind]}")
        return {
            pk: (scope_id, length, json.loads(bag) if isinstance(bag, str) else bag, own)
            for pk, scope_id, length, bag, own in cursor.fetchall()
        }


def _postings() -> list[tuple]:
    from memory.search import postgres

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {postgres.POSTINGS} ORDER BY kind, id, term")
        return cursor.fetchall()


def _statistics() -> tuple[list, list]:
    from memory.search import postgres

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT kind, term, scope_id, df FROM {postgres.DF} WHERE df <> 0 ORDER BY 1, 2, 3"
        )
        df = cursor.fetchall()
        cursor.execute(
            f"SELECT kind, scope_id, docs, length FROM {postgres.TOTALS} WHERE docs <> 0 "
            "ORDER BY 1, 2"
        )
        totals = [(kind, scope, docs, round(length, 3)) for kind, scope, docs, length in cursor]
    return df, totals


def test_it_detects_and_repairs_drift_in_postgresqls_stored_documents(
    project_scope, write_narrative, django_capture_on_commit_callbacks
):
    from memory.search import postgres

    dropped, turns = _native_documents(
        project_scope, write_narrative, django_capture_on_commit_callbacks
    )
    documents = {kind: _stored(kind) for kind in postgres.DOC_TABLES}
    postings = _postings()
    statistics = _statistics()
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {postgres.DOC_TABLES['memory']} WHERE id = %s", [dropped.pk])
        cursor.execute(
            f"INSERT INTO {postgres.DOC_TABLES['memory']} (id, scope_id, length, bag) "
            "VALUES (987654, %s, 1, '{\"stale\": 1}')",
            [project_scope.pk],
        )
        cursor.execute(
            f"UPDATE {postgres.DOC_TABLES['turn']} SET bag = '{{\"other\": 1}}' WHERE id = %s",
            [turns[1].pk],
        )
        # Postings disagreeing with their documents: a changed frequency, and one of no row.
        cursor.execute(
            f"UPDATE {postgres.POSTINGS} SET tf = 7 WHERE kind = 'turn' AND id = %s", [turns[0].pk]
        )
        cursor.execute(
            f"INSERT INTO {postgres.POSTINGS} (kind, id, term, scope_id, tf, length) "
            "VALUES ('memory', 555555, 'stale', %s, 1, 1)",
            [project_scope.pk],
        )
    report = StringIO()
    call_command("reindex", "--check", stdout=report)
    assert "memory  drift found: 1 missing, 2 orphaned, 0 stale" in report.getvalue()
    assert "turn    drift found: 0 missing, 0 orphaned, 2 stale" in report.getvalue()
    assert _stored("memory").keys() != documents["memory"].keys()

    report = StringIO()
    call_command("reindex", stdout=report)
    assert "memory  repaired: 1 missing, 2 orphaned, 0 stale" in report.getvalue()
    assert {kind: _stored(kind) for kind in postgres.DOC_TABLES} == documents
    assert _postings() == postings
    # Repairs go through the same apply as writes, so BM25's statistics come back exact too.
    assert _statistics() == statistics
    assert memory_search(query="边界", scope_ids=[project_scope.pk])[0].memory.pk == dropped.pk

    report = StringIO()
    call_command("reindex", "--check", stdout=report)
    assert "memory  clean" in report.getvalue() and "turn    clean" in report.getvalue()
    assert AuditEvent.objects.filter(target_type="search_index").count() == 1


def test_it_detects_and_recounts_bm25_statistics_that_drifted_from_the_documents(
    project_scope, write_narrative, django_capture_on_commit_callbacks
):
    from memory.search import postgres

    _native_documents(project_scope, write_narrative, django_capture_on_commit_callbacks)
    statistics = _statistics()
    with connection.cursor() as cursor:
        # A doubled delta and a lost one: every document is still right, every score is not.
        cursor.execute(
            f"UPDATE {postgres.DF} SET df = df + 1 WHERE kind = 'memory' AND term = %s",
            [statistics[0][0][1]],
        )
        cursor.execute(f"UPDATE {postgres.TOTALS} SET docs = docs - 1 WHERE kind = 'turn'")
    report = StringIO()
    call_command("reindex", "--check", stdout=report)
    assert (
        "memory  drift found: 0 missing, 0 orphaned, 0 stale, BM25 statistics 1 off"
        in report.getvalue()
    )
    assert "turn    drift found: 0 missing, 0 orphaned, 0 stale, BM25 statistics 1 off" in (
        report.getvalue()
    )

    report = StringIO()
    call_command("reindex", stdout=report)
    assert "memory  repaired" in report.getvalue() and "recounted" in report.getvalue()
    assert _statistics() == statistics
    report = StringIO()
    call_command("reindex", "--check", stdout=report)
    assert "memory  clean" in report.getvalue() and "turn    clean" in report.getvalue()
    assert "BM25 statistics 0 off" in report.getvalue()


def test_it_finds_documents_whose_scope_length_or_model_no_longer_match_their_rows(
    project_scope, other_project_scope, write_narrative, django_capture_on_commit_callbacks
):
    """The terms can be right while what decides who sees a row (its scope), its BM25
    normalisation (its length) or its vector (model and dimension) is not."""
    from memory.search import postgres

    dropped, turns = _native_documents(
        project_scope, write_narrative, django_capture_on_commit_callbacks
    )
    documents = {kind: _stored(kind) for kind in postgres.DOC_TABLES}
    kept = next(pk for pk in documents["memory"] if pk != dropped.pk)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {postgres.DOC_TABLES['memory']} SET scope_id = %s WHERE id = %s",
            [other_project_scope.pk, dropped.pk],
        )
        cursor.execute(
            f"UPDATE {postgres.DOC_TABLES['memory']} SET model = 'another-model', dim = 3 "
            "WHERE id = %s",
            [kept],
        )
        cursor.execute(
            f"UPDATE {postgres.DOC_TABLES['turn']} SET length = length + 1 WHERE id = %s",
            [turns[2].pk],
        )
    report = StringIO()
    call_command("reindex", "--check", stdout=report)
    assert "memory  drift found: 0 missing, 0 orphaned, 2 stale" in report.getvalue()
    assert "turn    drift found: 0 missing, 0 orphaned, 1 stale" in report.getvalue()

    call_command("reindex", stdout=StringIO())
    assert {kind: _stored(kind) for kind in postgres.DOC_TABLES} == documents
    report = StringIO()
    call_command("reindex", "--check", stdout=report)
    assert "memory  clean" in report.getvalue() and "turn    clean" in report.getvalue()


def test_it_finds_turn_documents_stale_when_a_document_setting_changes(
    project_scope, write_narrative, django_capture_on_commit_callbacks, settings
):
    _, turns = _native_documents(project_scope, write_narrative, django_capture_on_commit_callbacks)
    settings.TIDELINE_SEARCH_DATE_WEIGHT = 2.0
    report = StringIO()
    call_command("reindex", "--check", stdout=report)
    assert "memory  clean" in report.getvalue()
    assert f"turn    drift found: 0 missing, 0 orphaned, {len(turns)} stale" in report.getvalue()
    call_command("reindex", stdout=StringIO())
    month = text_terms("January")[0]
    assert [bag[month] for _, _, bag, _ in _stored("turn").values()] == [2.0] * len(turns)
    report = StringIO()
    call_command("reindex", "--check", stdout=report)
    assert "turn    clean" in report.getvalue()


def test_it_says_there_is_nothing_to_check_with_the_per_process_index_on_postgresql(db, settings):
    if connection.vendor != "postgresql":
        pytest.skip("the per-process index mode is a PostgreSQL setting")
    settings.TIDELINE_SEARCH_POSTGRES = "process"
    report = StringIO()
    call_command("reindex", "--check", stdout=report)
    assert "per-process search index: no stored documents" in report.getvalue()
