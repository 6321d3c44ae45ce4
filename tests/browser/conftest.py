"""Debian's Chromium driven by Selenium, and the layout checks every owner-panel page passes."""

import os
import shutil
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

from tests.conftest import service_required

CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
)
# No name resolves except the live server's: a page that needs a CDN breaks as it would offline.
OFFLINE_FLAG = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def chromium_start(profile: Path, *, width: int, height: int, offline: bool = False):
    chromium = shutil.which("chromium")
    if chromium is None or not CHROMEDRIVER.exists():
        service_required("chromium", "apt-get install chromium chromium-driver")
    options = Options()
    options.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS, *([OFFLINE_FLAG] if offline else [])):
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


@pytest.fixture
def browser(tmp_path):
    driver = chromium_start(tmp_path / "chromium-profile", width=1400, height=1000)
    yield driver
    driver.quit()


@pytest.fixture
def laptop_browser(tmp_path):
    """The common laptop width the owner panel must read well at."""
    driver = chromium_start(tmp_path / "chromium-laptop", width=1366, height=768)
    yield driver
    driver.quit()


@pytest.fixture
def offline_browser(tmp_path):
    driver = chromium_start(tmp_path / "chromium-offline", width=1366, height=900, offline=True)
    yield driver
    driver.quit()


LAYOUT_PROBLEMS_JS = r"""
const problems = [];
const viewport = document.documentElement.clientWidth;
if (document.documentElement.scrollWidth > viewport + 1) {
  problems.push(`page scrolls sideways: ${document.documentElement.scrollWidth}px > ${viewport}px`);
}
const label = (el) => (el.textContent || '').trim().slice(0, 40);
for (const el of document.querySelectorAll('body *')) {
  if (el.closest('details:not([open])') || el.closest('script,style,template,svg')) continue;
  // Screen-reader-only labels are clipped on purpose.
  if (el.closest('.visually-hidden')) continue;
  const style = getComputedStyle(el);
  if (style.display === 'none' || style.visibility === 'hidden') continue;
  const box = el.getBoundingClientRect();
  if (box.width === 0 || box.height === 0) continue;
  if (box.right > viewport + 1 || box.left < -1) {
    if (!el.closest('[data-scrolls]')) problems.push(`off-screen ${el.tagName} "${label(el)}"`);
  }
  const clips = ['hidden', 'clip'].includes(style.overflowX);
  if (clips && el.scrollWidth > el.clientWidth + 1 && style.textOverflow !== 'ellipsis'
      && el.children.length === 0 && label(el)) {
    problems.push(`clipped ${el.tagName} "${label(el)}"`);
  }
}
// A cell taller than its words (CJK characters count one each) has a word broken across lines.
for (const cell of document.querySelectorAll('td, th')) {
  const text = (cell.innerText || '').trim();
  if (!text || cell.querySelector('table, img, svg, input, select')) continue;
  const tokens = text.replace(/[\u2e80-\uffff]/g, ' x ').split(/[\s\-\/]+/).filter(Boolean).length;
  const bottoms = new Set();
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.textContent.trim()) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    for (const r of range.getClientRects()) if (r.width > 0) bottoms.add(Math.round(r.bottom));
  }
  const lines = bottoms.size;
  if (lines > tokens) problems.push(`word broken in ${cell.tagName} "${label(cell)}"`);
}
for (const svg of document.querySelectorAll('svg')) {
  const frame = svg.getBoundingClientRect();
  for (const text of svg.querySelectorAll('text')) {
    const box = text.getBoundingClientRect();
    if (box.width === 0) continue;
    if (box.left < frame.left - 1 || box.right > frame.right + 1 ||
        box.top < frame.top - 1 || box.bottom > frame.bottom + 1) {
      problems.push(`svg label cut "${label(text)}"`);
    }
  }
}
return problems;
"""


def layout_problems(driver) -> list[str]:
    """What overflows the viewport, and which labels are cut, on the current page."""
    return driver.execute_script(LAYOUT_PROBLEMS_JS)


@pytest.fixture
def screenshots(tmp_path) -> Path:
    """Where screenshots go: docs/screenshots/ with TIDELINE_SCREENSHOTS=update (to refresh the
    README's pictures), else the test's own temporary directory."""
    if os.environ.get("TIDELINE_SCREENSHOTS") == "update":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return SCREENSHOTS
    return tmp_path


def screenshot_save(driver, folder: Path, name: str) -> Path:
    """The whole page (the window grown to its height), as a PNG."""
    path = folder / f"{name}.png"
    height = driver.execute_script("return document.documentElement.scrollHeight")
    width = driver.get_window_size()["width"]
    driver.set_window_size(width, min(max(height + 120, 600), 2400))
    driver.save_screenshot(str(path))
    return path
