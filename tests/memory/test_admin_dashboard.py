"""The owner panel's home and what it links to: sentences about the owner, truthful actors, and
no link that answers 404."""

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from django.contrib.staticfiles import finders
from django.urls import reverse
from django.utils import timezone

from dream import llm_layers
from dream.models import DreamRun
from memory.admin.dashboard import dashboard_context
from memory.admin.display import WRITTEN_MODELS, actor_text, dream_layer_rows
from memory.models import Actor, AuditEvent, ProfileKind
from memory.services.narratives import NarrativeInput, narrative_write
from memory.services.threads import thread_write
from tests.browser.owner_data import AGENT_DELETED, PREFERENCE, THREAD, owner_panel_seed

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(db):
    return owner_panel_seed()


@pytest.fixture
def owner_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("owner", "", None))
    return client


def hrefs(html: str) -> set[str]:
    return {unquote(h).replace("&amp;", "&") for h in re.findall(r'href="([^"#][^"]*)"', html)}


def test_it_puts_the_owner_first_on_the_dashboard(seeded):
    context = dashboard_context()

    assert context["profiles"][0]["profile"].kind == ProfileKind.USER
    sentences = [line.text for line in context["profiles"][0]["lines"]]
    assert PREFERENCE in sentences and sentences.index(PREFERENCE) < 3
    assert context["threads"][0].text == THREAD
    assert context["scopes"][0]["scope"] == seeded["project"]
    assert AGENT_DELETED not in [
        line.text for group in context["scopes"] for line in group["lines"]
    ]
    assert context["dream"]["run"] == seeded["run"]
    assert "<svg" in context["heatmap"]["svg"]


@pytest.mark.parametrize(
    "page",
    [
        "admin:index",
        "admin:memory_fact_changelist",
        "admin:memory_narrative_changelist",
        "admin:memory_auditevent_changelist",
        "engine_status",
    ],
)
def test_it_links_nothing_that_answers_404(owner_client, seeded, page):
    html = owner_client.get(reverse(page)).content.decode()
    links = hrefs(html) | hrefs(
        owner_client.get(
            reverse("admin:dream_dreamrun_change", args=[seeded["run"].pk])
        ).content.decode()
    )

    broken = []
    for link in sorted(links):
        parts = urlsplit(link)
        if parts.scheme or parts.netloc:
            broken.append(link)
        elif parts.path.startswith("/static/"):
            if finders.find(parts.path.removeprefix("/static/")) is None:
                broken.append(link)
        elif owner_client.get(link, follow=True).status_code >= 400:
            broken.append(link)
    assert broken == []
    assert "View site" not in html


def test_it_has_a_favicon_and_a_home(owner_client):
    favicon = owner_client.get("/favicon.ico")
    home = owner_client.get("/")

    assert favicon.status_code == 302 and finders.find(favicon.url.removeprefix("/static/"))
    assert home.status_code == 302 and home.url == reverse("admin:index")


def test_it_says_who_expired_a_memory(owner_client, seeded):
    narratives = owner_client.get(reverse("admin:memory_narrative_changelist")).content.decode()
    audit = owner_client.get(
        reverse("admin:memory_auditevent_changelist") + "?action__exact=expire"
    ).content.decode()

    assert "expired · by agent" in narratives and "manual (owner)" not in narratives
    assert "agent · key laptop" in audit
    event = AuditEvent.objects.get(action="expire", target_id=seeded["doomed"].pk)
    assert (event.actor, event.key_id is not None) == (Actor.AGENT, True)


@pytest.mark.parametrize(
    "actor,target,expected",
    [
        (Actor.OWNER, "fact", "owner"),
        (Actor.AGENT, "narrative", "agent"),
        (Actor.LLM, "fact", "DREAM (LLM)"),
        (Actor.SYSTEM, "topiccluster", "DREAM (script)"),
        (Actor.SYSTEM, "narrative", "system"),
    ],
)
def test_it_names_every_actor_as_the_owner_would(actor, target, expected):
    assert actor_text(actor=actor, target_type=target) == expected


def test_it_links_each_id_a_dream_run_wrote_to_the_page_of_its_own_table(
    owner_client, project_scope, other_project_scope
):
    """Ids are counted per table: a layer's thread #n is not memory #n, which may be any memory
    of any project. Each id links to the page of what it is."""
    other = narrative_write(
        data=NarrativeInput(scope_id=other_project_scope.pk, gesture="Beta payroll export note")
    )
    tension = narrative_write(
        data=NarrativeInput(scope_id=project_scope.pk, gesture="We moved the alpha index to PG")
    )
    thread = thread_write(
        scope_id=project_scope.pk,
        content="Check the alpha index migration's error log",
        source_memory_id=tension.pk,
    )
    aged = thread_write(scope_id=project_scope.pk, content="Compare the two index engines' locks")
    written = {
        "threads": [thread.pk],
        "threads_aged": [aged.pk],
        "tensions": [tension.pk],
        "gate_rejected": [other.pk],
        "omens": [other.pk],
    }
    run = DreamRun.objects.create(
        layer="combing",
        day=timezone.localdate(),
        status="ok",
        stats={"layers": {"combing": {"status": "ok", "written": written}}, "order": ["combing"]},
    )

    html = owner_client.get(reverse("admin:dream_dreamrun_change", args=[run.pk])).content.decode()
    layers = html[
        html.index('id="tl-layers"') : html.index("</table>", html.index('id="tl-layers"'))
    ]
    assert set(re.findall(r'href="(/admin/[^"]+)"', layers)) == {
        reverse("admin:memory_thread_change", args=[thread.pk]),
        reverse("admin:memory_thread_change", args=[aged.pk]),
        reverse("admin:memory_narrative_change", args=[tension.pk]),
        # A refused write may be of any kind: the page of every memory leads to its typed record.
        reverse("admin:memory_memory_change", args=[other.pk]),
    }
    # An id of a kind the panel does not know is shown, not linked back to this page.
    assert 'href=""' not in layers
    assert f"omens ×1: #{other.pk}</div>" in layers


def test_it_shows_an_id_of_a_kind_it_does_not_know_unlinked_and_still_counts_it():
    stats = {"layers": {"drift": {"status": "ok", "written": {"threads": [7], "omens": [7, 8]}}}}

    (row,) = dream_layer_rows(stats)

    # `manage.py dream` reports how many of each kind a run wrote from these same rows.
    assert {group["kind"]: group["links"] for group in row["written"]} == {
        "threads": [(reverse("admin:memory_thread_change", args=[7]), 7)],
        "omens": [("", 7), ("", 8)],
    }


def test_it_knows_the_table_of_every_kind_a_dream_layer_writes():
    source = Path(llm_layers.__file__).read_text(encoding="utf-8")
    kinds = set(re.findall(r'(?:wrote\(|_kept_as\(\w+, )"(\w+)"', source))

    assert "threads_aged" in kinds and "dreams" in kinds
    assert kinds | {"gate_rejected"} == set(WRITTEN_MODELS)
