"""The owner panel in a real browser at laptop width: the dashboard leads with the owner, list
pages and the DREAM run page fit the screen, and no label is cut. With TIDELINE_SCREENSHOTS=update the
screenshots refresh docs/screenshots/ (shown in the README)."""

import pytest
from django.test import Client
from django.urls import reverse
from selenium.webdriver.common.by import By

from tests.browser.conftest import layout_problems, screenshot_save
from tests.browser.owner_data import PREFERENCE, SELF_FACT, THREAD, owner_panel_seed

pytestmark = pytest.mark.browser


@pytest.fixture
def seeded(transactional_db):
    return owner_panel_seed()


@pytest.fixture
def owner_browser(live_server, laptop_browser, django_user_model, seeded):
    owner = django_user_model.objects.create_superuser("owner", "", None)
    client = Client()
    client.force_login(owner)
    laptop_browser.get(f"{live_server.url}/static/tideline/favicon.svg")
    laptop_browser.add_cookie({"name": "sessionid", "value": client.cookies["sessionid"].value})
    return laptop_browser


def visit(browser, live_server, url: str):
    browser.set_window_size(1366, 768)
    browser.get(f"{live_server.url}{url}")
    return browser.find_element(By.ID, "content")


def test_it_leads_with_the_owner_on_the_dashboard(owner_browser, live_server, screenshots):
    content = visit(owner_browser, live_server, reverse("admin:index"))

    sections = [h.text for h in content.find_elements(By.CSS_SELECTOR, ".tl-card > h2")]
    assert sections[:4] == [
        "Who the agent is",
        "What Tideline knows about you",
        "Newest memories by scope",
        "Open threads",
    ]
    assert SELF_FACT in content.find_element(By.ID, "tl-self").text
    knows = content.find_element(By.ID, "tl-owner").text
    print(knows)
    assert PREFERENCE in knows and "commit style: small commits" in knows
    assert THREAD in content.find_element(By.ID, "tl-threads").text
    assert "partial" in content.find_element(By.ID, "tl-dream").text
    assert content.find_element(By.CSS_SELECTOR, "#tl-attention svg rect")
    internals = content.find_element(By.ID, "tl-internals")
    assert internals.get_attribute("open") is None
    assert not owner_browser.find_elements(By.LINK_TEXT, "View site")
    assert layout_problems(owner_browser) == []
    assert screenshot_save(owner_browser, screenshots, "dashboard").stat().st_size > 50_000


@pytest.mark.parametrize("model", ["narrative", "fact", "memory", "auditevent"])
def test_it_fits_list_pages_in_a_laptop_screen(owner_browser, live_server, screenshots, model):
    visit(owner_browser, live_server, reverse(f"admin:memory_{model}_changelist"))

    if model == "fact":
        screenshot_save(owner_browser, screenshots, "facts-list")
    assert layout_problems(owner_browser) == []
    table = owner_browser.find_element(By.ID, "result_list")
    if model != "auditevent":
        summary = owner_browser.find_element(By.CSS_SELECTOR, "th.column-summary_line")
        assert summary.size["width"] >= 0.4 * table.size["width"]


def test_it_says_who_deleted_a_memory(owner_browser, live_server, seeded):
    visit(owner_browser, live_server, reverse("admin:memory_narrative_changelist"))

    row = owner_browser.find_element(By.XPATH, "//tr[contains(., 'old cron box')]")
    assert "expired · by agent" in row.text and "owner" not in row.text


def test_it_shows_a_dream_run_layer_by_layer(owner_browser, live_server, seeded, screenshots):
    visit(
        owner_browser, live_server, reverse("admin:dream_dreamrun_change", args=[seeded["run"].pk])
    )

    rows = owner_browser.find_elements(By.CSS_SELECTOR, "#tl-layers tbody tr")
    cells = {row.find_element(By.TAG_NAME, "th").text: row.text for row in rows}
    assert list(cells) == ["scan", "script", "solidify", "combing", "drift", "dream"]
    assert "track b turns 14" in cells["scan"]
    assert "failed" in cells["solidify"] and "invalid JSON" in cells["solidify"]
    assert f"fact ×1: #{seeded['narratives'][0].pk}" in cells["combing"]
    assert "refused by the gate" in cells["combing"] and "3010" in cells["combing"]
    assert layout_problems(owner_browser) == []
    screenshot_save(owner_browser, screenshots, "dream-run")


def test_it_draws_the_heatmap_on_the_dashboard_with_whole_labels(
    owner_browser, live_server, screenshots
):
    visit(owner_browser, live_server, reverse("admin:index"))
    picture = owner_browser.find_element(By.CSS_SELECTOR, "#tl-attention")

    labels = [t.text for t in picture.find_elements(By.CSS_SELECTOR, "svg text") if t.text]
    assert any(label.startswith("#0 边界检查") for label in labels)
    assert layout_problems(owner_browser) == []
    owner_browser.execute_script("arguments[0].scrollIntoView()", picture)
    picture.screenshot(str(screenshots / "heatmap.png"))
