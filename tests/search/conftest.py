import pytest

from memory.services.narratives import NarrativeInput, narrative_write


@pytest.fixture
def write_narrative(django_capture_on_commit_callbacks):
    """Write a narrative through the real service and run its after-commit embedding."""

    def write(scope, gesture, **fields):
        with django_capture_on_commit_callbacks(execute=True):
            return narrative_write(
                data=NarrativeInput(gesture=gesture, scope_id=scope.pk, **fields)
            )

    return write
