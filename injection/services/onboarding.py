"""What a user does after `./tideline up`: the next steps, with this checkout's real paths."""

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

MCP_HTTP_PORT = 8765
HOOK_EVENTS = ("SessionStart", "UserPromptSubmit", "Stop")


@dataclass(frozen=True)
class Checkout:
    root: Path  # the directory holding ./tideline and manage.py
    python: Path  # the venv's interpreter, as invoked (not resolved through its symlink)
    url: str  # where ./tideline up serves


def claude_code_settings(*, checkout: Checkout) -> dict:
    # Claude Code runs the command through a shell: a path with a space must stay one word.
    hook = shlex.quote(str(checkout.root / "injection" / "hooks" / "claude_code.py"))
    return {
        "env": {"TIDELINE_URL": checkout.url, "TIDELINE_API_KEY": "tl_…"},
        "hooks": {
            event: [{"hooks": [{"type": "command", "command": f"python3 -I {hook} {event}"}]}]
            for event in HOOK_EVENTS
        },
    }


def mcp_client_config(*, checkout: Checkout) -> dict:
    return {
        "mcpServers": {
            "tideline": {
                "command": str(checkout.python),
                "args": [str(checkout.root / "manage.py"), "mcp"],
            },
            "tideline-http": {
                "type": "http",
                "url": f"http://127.0.0.1:{MCP_HTTP_PORT}/mcp",
                "headers": {"Authorization": "Bearer tl_…"},
            },
        }
    }


def next_steps_render(*, checkout: Checkout) -> str:
    # Commands to paste into a shell; the JSON blocks carry their own escaping.
    cli = shlex.quote(str(checkout.root / "tideline"))
    pretty = {"indent": 2, "ensure_ascii": False}
    return "\n".join(
        [
            "Next steps",
            "",
            "1. Create an API key for an agent (printed once; replace tl_… below with it):",
            f"   {cli} manage apikey create --scope ~/code/my-project --name laptop",
            "",
            "2. Claude Code: merge this into ~/.claude/settings.json",
            json.dumps(claude_code_settings(checkout=checkout), **pretty),
            "",
            "3. An MCP client (e.g. Claude Code's .mcp.json): stdio acts as the owner in its cwd;",
            f"   for HTTP, first run: {cli} manage mcp --http --port {MCP_HTTP_PORT}",
            json.dumps(mcp_client_config(checkout=checkout), **pretty),
            "",
            "4. Hermes Agent: install the memory provider, select it, give it the URL and key",
            f"   {cli} manage hermes_install",
            "   hermes config set memory.provider tideline",
            f"   hermes memory setup        # TIDELINE_URL={checkout.url}, TIDELINE_API_KEY=tl_…",
            "",
            f"Any management command: {cli} manage <command> …  (this list again: "
            f"{cli} manage next_steps)",
        ]
    )
