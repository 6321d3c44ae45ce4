"""The owner's view: DREAM history is read-only, and attention is a picture, not a table."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dream.heatmap import heatmap_svg
from dream.models import DreamRun, EmbeddingCluster
from dream.pipeline import dream_run
from dream.selectors import attention_heatmap_read
from memory.models import AttentionEvent, Narrative
from memory.services.embedding import memories_embed

TEXTS = [
    "We chose SQLite with WAL for the archive index",
    "SQLite locked under two writers during the import",
    "A walk along the harbour at low tide",
    "The tide pools were full of tiny crabs",
    "Practising a Chopin nocturne, the left hand is slow",
    "Piano lesson: pedal less in the nocturne",
    "The hosting bill doubled this month",
    "Budget review: cut the unused staging server",
    "照照 reviewed the migration plan carefully",
    "甜心 suggested taking one session per day for the bridge",
]


@pytest.fixture
def clustered(global_scope, write_narrative):
    narratives = [write_narrative(global_scope, text) for text in TEXTS]
    memories_embed(memory_ids=[n.pk for n in narratives])
    dream_run(layer="script")
    now = timezone.now()
    for days_ago, narrative in [(0, narratives[0]), (0, narratives[0]), (3, narratives[2])]:
        AttentionEvent.objects.create(
            memory=narrative, source="t1_prefetch", occurred_at=now - timedelta(days=days_ago)
        )
    return narratives


def test_it_draws_the_heatmap_as_an_svg_with_lit_rows_first_and_deserts_marked(clustered):
    heatmap = attention_heatmap_read(days=30)
    svg = heatmap_svg(heatmap)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("<rect") >= len(heatmap["clusters"]) * 30
    assert f"{heatmap['events']} recalls ·" in svg
    assert svg.count(">desert<") == len(heatmap["deserts"])
    labels = re.findall(r'text-anchor="end" fill="([^"]+)">(#\d+)', svg)
    lit_first = [colour for colour, _ in labels]
    # Lit rows (ink) come before desert rows (sand), never interleaved.
    assert lit_first == sorted(lit_first, key=lambda colour: colour != "#1f2a36")
    assert "<script" not in svg


def test_it_escapes_memory_text_inside_the_picture(global_scope, write_narrative):
    narratives = [
        write_narrative(global_scope, f"<script>alert({i})</script> & more {i}") for i in range(5)
    ]
    memories_embed(memory_ids=[n.pk for n in narratives])
    dream_run(layer="script")
    svg = heatmap_svg(attention_heatmap_read(days=7))
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_it_shows_runs_read_only_and_the_heatmap_page_to_the_owner(clustered, admin_client):
    run = DreamRun.objects.get()
    listing = admin_client.get(reverse("admin:dream_dreamrun_changelist"))
    assert listing.status_code == 200
    assert reverse("admin:dream_attention_heatmap") in listing.content.decode()
    detail = admin_client.get(reverse("admin:dream_dreamrun_change", args=[run.pk]))
    assert detail.status_code == 200 and "soft_clusters" in detail.content.decode()
    assert (
        admin_client.get(reverse("admin:dream_dreamrun_delete", args=[run.pk])).status_code == 403
    )
    assert admin_client.get(reverse("admin:dream_dreamrun_add")).status_code == 403

    page = admin_client.get(reverse("admin:dream_attention_heatmap") + "?days=7")
    body = page.content.decode()
    assert page.status_code == 200
    assert '<div class="module heatmap-picture" id="attention-heatmap"><svg' in body
    assert "Attention · last 7 days" in body
    cluster = EmbeddingCluster.objects.first()
    assert (
        admin_client.get(
            reverse("admin:dream_embeddingcluster_change", args=[cluster.pk])
        ).status_code
        == 200
    )
    assert admin_client.get(reverse("admin:dream_topiccluster_changelist")).status_code == 200
    assert admin_client.get(reverse("admin:dream_entitynode_changelist")).status_code == 200


@pytest.mark.browser
def test_it_renders_the_heatmap_picture_in_a_real_browser(
    transactional_db, live_server, admin_user, tmp_path, global_scope, write_narrative
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.browser.conftest import chromium_start

    narratives = [write_narrative(global_scope, text) for text in TEXTS]
    memories_embed(memory_ids=[n.pk for n in narratives])
    dream_run(layer="script")
    AttentionEvent.objects.create(memory=Narrative.objects.first(), source="t1_prefetch")
    browser = chromium_start(tmp_path / "profile", width=1400, height=1000)
    wait = WebDriverWait(browser, 20)
    try:
        browser.get(f"{live_server.url}/admin/login/")
        wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys("admin")
        browser.find_element(By.NAME, "password").send_keys("password")
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        # The login's answer sets the session cookie; leaving before it lands reaches the
        # heatmap anonymous and gets the login form back.
        wait.until(ec.presence_of_element_located((By.ID, "user-tools")))
        browser.get(f"{live_server.url}{reverse('admin:dream_attention_heatmap')}")
        picture = wait.until(
            ec.presence_of_element_located((By.CSS_SELECTOR, "#attention-heatmap svg"))
        )
        assert picture.size["width"] > 600 and picture.size["height"] > 150
        cells = browser.find_elements(By.CSS_SELECTOR, "#attention-heatmap svg rect")
        assert len(cells) > 5 * 30
        assert "desert" in picture.text
        browser.save_screenshot(str(tmp_path / "heatmap.png"))
        assert (tmp_path / "heatmap.png").stat().st_size > 10_000
    finally:
        browser.quit()


def test_it_refuses_the_heatmap_page_to_staff_without_the_memory_view_permission(
    clustered, client, django_user_model
):
    from django.contrib.auth.models import Permission

    staff = django_user_model.objects.create_user(username="helper", password=None, is_staff=True)
    client.force_login(staff)
    url = reverse("admin:dream_attention_heatmap")
    page = client.get(url)
    assert page.status_code == 403
    assert TEXTS[0][:20] not in page.content.decode()

    staff.user_permissions.add(Permission.objects.get(codename="view_memory"))
    staff = django_user_model.objects.get(pk=staff.pk)
    client.force_login(staff)
    assert client.get(url).status_code == 200
