"""/api/docs with no network: Swagger UI comes from Tideline's own static files."""

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

pytestmark = pytest.mark.browser


def test_it_renders_the_api_docs_with_the_network_off(live_server, offline_browser):
    offline_browser.get(f"{live_server.url}/api/docs")

    WebDriverWait(offline_browser, 30).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, ".swagger-ui .opblock-tag"))
    )
    title = offline_browser.find_element(By.CSS_SELECTOR, ".swagger-ui .info .title").text
    tags = {t.text for t in offline_browser.find_elements(By.CSS_SELECTOR, ".opblock-tag span")}
    loaded = offline_browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert "Tideline" in title
    assert {"injection", "memories", "search"} <= {tag.split()[0] for tag in tags if tag}
    assert loaded and all(name.startswith(live_server.url) for name in loaded)
