"""A client nobody on the team wrote: the MCP Inspector CLI (npm) against `manage.py mcp` over stdio.

The Inspector is installed from the npm registry into Tideline's cache dir on first use. Its CLI
takes no HTTP headers, so it cannot carry our bearer key: HTTP is covered by the SDK client in
test_mcp.py.
"""

import json
import shutil
import subprocess
import sys

import pytest
from django.conf import settings

from tests.conftest import database_url, service_required
from tests.injection.test_mcp import EXPECTED_TOOLS

pytestmark = pytest.mark.slow

INSPECTOR_VERSION = "0.15.0"


@pytest.fixture(scope="module")
def inspector() -> str:
    prefix = settings.DATA_DIR / "cache" / f"mcp-inspector-{INSPECTOR_VERSION}"
    binary = prefix / "node_modules" / ".bin" / "mcp-inspector"
    if binary.exists():
        return str(binary)
    if shutil.which("npm") is None:
        service_required("npm", "the MCP Inspector CLI is installed with npm")
    installed = subprocess.run(
        [
            "npm",
            "install",
            "--no-audit",
            "--no-fund",
            "--prefix",
            str(prefix),
            f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if installed.returncode != 0 or not binary.exists():
        service_required("the MCP Inspector", installed.stderr.strip()[-300:])
    return str(binary)


def _inspect(inspector: str, cwd: str, *method: str) -> tuple[int, str]:
    done = subprocess.run(
        [
            inspector,
            "--cli",
            "-e",
            f"TIDELINE_DATABASE_URL={database_url()}",
            "-e",
            "TIDELINE_LOG_LEVEL=ERROR",
            sys.executable,
            str(settings.BASE_DIR / "manage.py"),
            "mcp",
            "--cwd",
            cwd,
            *method,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


def test_it_lists_annotated_tools_and_round_trips_a_memory(inspector, transactional_db, tmp_path):
    project = str(tmp_path)
    status, listed = _inspect(inspector, project, "--method", "tools/list")
    assert status == 0, listed
    tools = json.loads(listed)["tools"]
    assert {tool["name"] for tool in tools} == EXPECTED_TOOLS
    for tool in tools:
        assert "readOnlyHint" in tool["annotations"], tool["name"]

    status, written = _inspect(
        inspector,
        project,
        "--method",
        "tools/call",
        "--tool-name",
        "memory_write",
        "--tool-arg",
        "gesture=we ship the archive with zstd level 19",
    )
    assert status == 0, written
    assert json.loads(written)["isError"] is False, written

    status, found = _inspect(
        inspector,
        project,
        "--method",
        "tools/call",
        "--tool-name",
        "memory_search",
        "--tool-arg",
        "q=zstd archive",
    )
    assert status == 0, found
    results = json.loads(found)["structuredContent"]["results"]
    assert any("zstd level 19" in result["memory"]["summary"] for result in results), found


def test_it_offers_no_prompts_or_resources_it_does_not_serve(inspector, transactional_db, tmp_path):
    for method in ("prompts/list", "resources/list"):
        status, answer = _inspect(inspector, str(tmp_path), "--method", method)
        assert status != 0 and "Method not found" in answer, (method, answer)
