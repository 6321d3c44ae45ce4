import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from memory.models import AuditEvent, FactKind, MemoryStatus
from memory.services.facts import FactInput, fact_write
from memory.services.scopes import scope_ensure, scope_global

pytestmark = pytest.mark.browser

SUMMARY = "[偏好] 用户希望回复用简体中文"


@pytest.fixture
def memories(transactional_db):
    preference = fact_write(
        data=FactInput(
            scope_id=scope_global().pk,
            profile_name="用户",
            kind=FactKind.PREFERENCE,
            predicate="responds_in",
            value="简体中文",
            summary=SUMMARY,
        )
    )
    project = scope_ensure(kind="project", key="/work/projects/archive-manager")
    fact_write(
        data=FactInput(
            scope_id=project.pk,
            profile_name="archive-manager",
            profile_kind="project",
            kind=FactKind.FACT,
            predicate="security_status",
            value="has_vulnerabilities",
        )
    )
    return preference


def test_it_expires_a_memory_found_by_its_summary_and_shows_the_audit_entry(
    live_server, browser, memories, django_user_model, tmp_path
):
    django_user_model.objects.create_superuser("owner", "owner@example.com", "tide-pass-1")
    wait = WebDriverWait(browser, 20)

    browser.get(f"{live_server.url}/admin/")
    wait.until(ec.presence_of_element_located((By.ID, "id_username"))).send_keys("owner")
    browser.find_element(By.ID, "id_password").send_keys("tide-pass-1")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait.until(ec.presence_of_element_located((By.ID, "tl-backlog")))

    browser.get(f"{live_server.url}/admin/memory/memory/")
    search = wait.until(ec.presence_of_element_located((By.ID, "searchbar")))
    search.send_keys("回复用简体")
    search.submit()
    wait.until(ec.url_contains("q="))
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert [row.find_element(By.CSS_SELECTOR, "th").text for row in rows] == [SUMMARY]
    browser.save_screenshot(str(tmp_path / "memory-changelist.png"))

    rows[0].find_element(By.CSS_SELECTOR, "input.action-select").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("expire")
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    message = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".messagelist .success")))
    assert "expired: 1 row(s)" in message.text.lower()
    memories.refresh_from_db()
    assert memories.status == MemoryStatus.EXPIRED

    browser.get(f"{live_server.url}/admin/memory/auditevent/?action__exact=expire")
    rows = wait.until(
        ec.presence_of_all_elements_located((By.CSS_SELECTOR, "#result_list tbody tr"))
    )
    assert len(rows) == 1
    row_text = rows[0].text
    assert SUMMARY in row_text
    assert "owner panel: expired by owner" in row_text
    browser.save_screenshot(str(tmp_path / "audit-changelist.png"))
    event = AuditEvent.objects.get(action="expire")
    assert (event.actor, event.target_id) == ("owner", memories.pk)
