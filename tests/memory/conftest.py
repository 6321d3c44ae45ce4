"""The owner panel's tests share an owner signed in and one preference to look at."""

import pytest

from memory.models import FactKind
from memory.services.facts import FactInput, fact_write
from memory.services.narratives import NarrativeInput, narrative_write

PREFERENCE_SUMMARY = "[偏好] 用户希望回复用简体中文"


def archive_fact(scope, predicate, value, **extra):
    """A fact about the archive-manager project, written as an agent writes one."""
    return fact_write(
        data=FactInput(
            scope_id=scope.pk,
            profile_name="archive-manager",
            profile_kind="project",
            kind=FactKind.FACT,
            predicate=predicate,
            value=value,
            **extra,
        )
    )


def lives_in(scope, value, *, writer_sees_secrets=False, **extra):
    """Where the user lives, a fact with one current value at a time."""
    return fact_write(
        data=FactInput(
            scope_id=scope.pk,
            profile_name="user",
            kind=FactKind.FACT,
            predicate="lives_in",
            value=value,
            **extra,
        ),
        writer_sees_secrets=writer_sees_secrets,
    )


def narrate(scope, gesture, **extra):
    return narrative_write(data=NarrativeInput(scope_id=scope.pk, gesture=gesture, **extra))


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_superuser("owner", "owner@example.com", None)


@pytest.fixture
def owner_client(client, owner):
    client.force_login(owner)
    return client


@pytest.fixture
def preference(global_scope):
    return fact_write(
        data=FactInput(
            scope_id=global_scope.pk,
            profile_name="用户",
            kind=FactKind.PREFERENCE,
            predicate="responds_in",
            value="简体中文",
            summary=PREFERENCE_SUMMARY,
        )
    )
