from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from memory.search import memory_search
from memory.search.schema import MEMORY_WORD


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
