import pytest

from memory.services.facts import FactInput, fact_write
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


@pytest.fixture
def write_fact(django_capture_on_commit_callbacks):
    def write(scope, predicate, value, **fields):
        with django_capture_on_commit_callbacks(execute=True):
            return fact_write(
                data=FactInput(
                    scope_id=scope.pk,
                    profile_name="user",
                    kind="preference",
                    predicate=predicate,
                    value=value,
                    **fields,
                )
            )

    return write
