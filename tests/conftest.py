import json
import os
from urllib.parse import quote

import pytest
from celery._state import _set_task_join_will_block
from django.db import connection
from django.db.backends.base.operations import BaseDatabaseOperations

from memory.db_guard import guard_install_sql, guard_remove_sql
from memory.models import Scope, ScopeKind
from memory.search.schema import MEMORY_TRIGRAM, MEMORY_WORD, TURN_TRIGRAM, TURN_WORD
from memory.services.scopes import scope_ensure, scope_global

IN_CI = os.environ.get("CI", "").lower() == "true"


def pytest_configure(config: pytest.Config) -> None:
    """Transactional tests (live server, real workers) end with Django's flush, a bulk DELETE that
    the no-delete guard rightly refuses. Lift the guard for exactly that statement list and put it
    back straight after, so the guard stays on for everything the test itself does."""
    original = BaseDatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        vendor = self.connection.vendor
        with self.connection.cursor() as cursor:
            for statement in guard_remove_sql(vendor):
                cursor.execute(statement)
        try:
            flushed = original(self, sql_list)
        finally:
            with self.connection.cursor() as cursor:
                for statement in guard_install_sql(vendor):
                    cursor.execute(statement)
        if vendor == "sqlite":
            # SQLite's search index has no delete triggers (nothing is deleted in operation), so
            # the flush's DELETEs would leave the next test a word index of rows that are gone.
            # (PostgreSQL's flush truncates, and its truncate triggers clear the documents.)
            with self.connection.cursor() as cursor:
                for word, trigram in ((MEMORY_WORD, MEMORY_TRIGRAM), (TURN_WORD, TURN_TRIGRAM)):
                    cursor.execute(f"DELETE FROM {word}")
                    cursor.execute(f"INSERT INTO {trigram}({trigram}) VALUES ('delete-all')")
        return flushed

    BaseDatabaseOperations.execute_sql_flush = execute_sql_flush


@pytest.fixture(autouse=True)
def celery_join_flag_cleared() -> None:
    """Celery's eager apply marks "inside a task" in a process-wide flag and restores it on the way
    out, so two threads applying at once (a live server's concurrent requests) can leave it set:
    a later test's `.delay().get()` would then fail with "Never call result.get() within a task".
    Which test ran before must not decide that, so each test starts with the flag clear."""
    _set_task_join_will_block(False)


def service_required(name: str, reason: str) -> None:
    """Outside CI a missing local service skips with a visible reason; in CI it fails loudly."""
    if IN_CI:
        pytest.fail(f"{name} is required in CI: {reason}")
    pytest.skip(f"{name} not available: {reason}")


def database_url() -> str:
    """This test's database as a TIDELINE_DATABASE_URL, for child processes (servers, workers)
    that must see what the test committed, on either backend."""
    database = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{database['NAME']}"
    credentials = quote(database["USER"] or "", safe="")
    if database["PASSWORD"]:
        credentials += ":" + quote(database["PASSWORD"], safe="")
    return (
        f"postgres://{credentials}@{database['HOST'] or '127.0.0.1'}:"
        f"{database['PORT'] or 5432}/{database['NAME']}"
    )


@pytest.fixture
def global_scope(db) -> Scope:
    return scope_global()


@pytest.fixture
def project_scope(db) -> Scope:
    return scope_ensure(kind=ScopeKind.PROJECT, key="/work/projects/archive-manager")


@pytest.fixture
def other_project_scope(db) -> Scope:
    return scope_ensure(kind=ScopeKind.PROJECT, key="/work/projects/billing-service")


@pytest.fixture
def db_vendor(db) -> str:
    return connection.vendor


@pytest.fixture
def fake_llm(no_owner_llm, settings, tmp_path):
    """A running fake OpenAI-compatible server, configured as Tideline's LLM for this test."""
    from tests.fakes.llm_server import FakeLLM

    fake = FakeLLM().start()
    settings.TIDELINE_LLM_CONFIG_FILE = tmp_path / "llm.json"
    settings.TIDELINE_LLM_TIMEOUT = 2.0
    # The file `llm set` writes, written directly: many tests using the fake have no database,
    # where `llm set` records its change.
    settings.TIDELINE_LLM_CONFIG_FILE.write_text(
        json.dumps({"base_url": fake.base_url, "model": "fake-model", "api_key": "sk-test-secret"})
    )
    yield fake
    fake.stop()


@pytest.fixture(autouse=True)
def no_owner_llm(settings, tmp_path):
    """Tests never read the developer's own LLM config: by default there is no LLM."""
    settings.TIDELINE_LLM_CONFIG_FILE = tmp_path / "no-llm.json"
