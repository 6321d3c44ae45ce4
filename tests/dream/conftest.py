import pytest

from memory.services.narratives import NarrativeInput, narrative_write


@pytest.fixture
def write_narrative():
    def write(scope, gesture, **fields):
        return narrative_write(data=NarrativeInput(scope_id=scope.pk, gesture=gesture, **fields))

    return write
