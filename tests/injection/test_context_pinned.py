"""What reaches the session-start block: pinned memories first (T2, T3), whole facts on a T3
line, and nothing that is not valid yet (T0, T2, T3)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from injection.services.context import context_session_start, t2_select, t3_select
from memory.models import Memory, Profile
from memory.services.facts import FactInput, fact_write
from memory.services.scopes import scope_visible_ids
from memory.services.self_concept import self_concept_write
from tests.injection.conftest import narrative_seed, weights_set

pytestmark = pytest.mark.django_db


def _fact(project, profile_name, predicate, value, **fields):
    return fact_write(
        data=FactInput(
            scope_id=project.pk,
            profile_name=profile_name,
            profile_kind="project",
            kind="fact",
            predicate=predicate,
            value=value,
            **fields,
        )
    )


def _profile_lines(project) -> dict[str, str]:
    return {
        item.text.split(" (")[0]: item.text
        for item in t3_select(scope_ids=scope_visible_ids(scope=project), labels={})
        if item.kind.startswith("profile")
    }


def test_it_puts_a_pinned_narrative_first_in_t2_whatever_its_weight_or_age(project):
    """Before, T2 ignored pinned: a pinned narrative under the weight cut never showed."""
    rule = narrative_seed(
        project, "billing-api never runs migrations during the EU business day", pinned=True
    )
    old_rule = narrative_seed(
        project, "billing-api deploys only from the release branch", pinned=True
    )
    heavy = narrative_seed(project, "the invoice exporter now streams rows", tags=["export"])
    weights_set({rule: 0.52, old_rule: 0.4, heavy: 0.9})
    Memory.objects.filter(pk=old_rule.pk).update(recorded_at=timezone.now() - timedelta(days=60))

    items = t2_select(scope_ids=scope_visible_ids(scope=project), labels={}, now=timezone.now())

    assert [item.memory_id for item in items] == [rule.pk, old_rule.pk, heavy.pk]


def test_it_orders_a_profiles_facts_pinned_then_importance_then_recency(project, settings):
    """Before, the facts on a T3 line were newest first and the line was cut at 100 characters:
    a pinned importance-5 fact written first was the one left off."""
    settings.TIDELINE_T3_PROFILE_LINE_CHARS = 300
    _fact(
        project,
        "billing-api",
        "prod_db_host",
        "db-prod-7.internal (read replicas: db-prod-8)",
        pinned=True,
        importance=5,
    )
    _fact(project, "billing-api", "owner_team", "Payments Platform", importance=4)
    _fact(project, "billing-api", "language", "Python 3.12", importance=2)
    _fact(project, "billing-api", "ci_system", "GitHub Actions", importance=2)

    line = _profile_lines(project)["billing-api"]

    assert line == (
        "billing-api (project): prod db host: db-prod-7.internal (read replicas: db-prod-8)"
        "; owner team: Payments Platform; ci system: GitHub Actions; language: Python 3.12"
    )
    settings.TIDELINE_T3_PROFILE_LINE_CHARS = 100
    assert _profile_lines(project)["billing-api"] == (
        "billing-api (project): prod db host: db-prod-7.internal (read replicas: db-prod-8); …"
    )


def test_it_cuts_a_t3_profile_line_between_facts_never_inside_a_value(project, settings):
    """Before, the line was clipped at the limit wherever it fell, mid-value."""
    values = {
        "language": "Python 3.12 with FastAPI",
        "ci_system": "GitHub Actions with self-hosted runners",
        "test_runner": "pytest with xdist, 4 workers",
        "owner_team": "Payments Platform team (Berlin)",
    }
    for predicate, value in values.items():
        _fact(project, "billing-api", predicate, value)

    line = _profile_lines(project)["billing-api"]

    assert len(line) <= settings.TIDELINE_T3_PROFILE_LINE_CHARS
    head, facts = line.split(": ", 1)
    assert head == "billing-api (project)" and facts.endswith("; …")
    shown = facts.removesuffix("; …").split("; ")
    expected = {f"{predicate.replace('_', ' ')}: {value}" for predicate, value in values.items()}
    assert 1 <= len(shown) < len(values) and set(shown) <= expected


def test_it_lists_a_profile_holding_a_pinned_fact_within_the_profile_cut(project, settings):
    settings.TIDELINE_T3_PROFILES = 2
    _fact(project, "legacy-ledger", "status", "read only since 2024", pinned=True)
    for name in ("alpha", "beta"):
        _fact(project, name, "status", "active")
    Profile.objects.filter(name="legacy-ledger").update(
        updated_at=timezone.now() - timedelta(days=30)
    )

    assert "legacy-ledger" in _profile_lines(project)


def test_it_injects_nothing_that_is_not_valid_yet(project):
    """Before, a memory valid from a future date counted as live now: "Bob is on call from March"
    was injected as today's on-call."""
    later = timezone.now() + timedelta(days=90)
    bob = _fact(project, "projl", "oncall_primary", "Bob")
    narrative = narrative_seed(project, "projl moves the on-call rota to weekly shifts")
    weights_set({narrative: 0.9})
    concept = self_concept_write(field="fact", content="I am projl's release agent")
    Memory.objects.filter(pk__in=[bob.pk, narrative.pk, concept.pk]).update(valid_from=later)

    block = context_session_start(scope_ids=scope_visible_ids(scope=project))

    assert "Bob" not in block.text
    assert "weekly shifts" not in block.text
    assert "release agent" not in block.text

    Memory.objects.filter(pk__in=[bob.pk, narrative.pk, concept.pk]).update(
        valid_from=timezone.now() - timedelta(minutes=1)
    )
    block = context_session_start(scope_ids=scope_visible_ids(scope=project))

    assert "Bob" in block.text and "weekly shifts" in block.text and "release agent" in block.text
