import pytest

from memory.services.narratives import NarrativeInput, narrative_write


@pytest.fixture
def write_narrative():
    def write(scope, gesture, **fields):
        return narrative_write(data=NarrativeInput(scope_id=scope.pk, gesture=gesture, **fields))

    return write


def database_url() -> str:
    """The test database as a TIDELINE_DATABASE_URL, for a subprocess (a worker, `manage.py`)."""
    from django.db import connection

    database = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{database['NAME']}"
    return (
        f"postgres://{database['USER']}:{database['PASSWORD']}@{database['HOST'] or '127.0.0.1'}:"
        f"{database['PORT'] or 5432}/{database['NAME']}"
    )
