"""Writes Hermes session files with hermes-agent's own writers (run inside a Hermes environment):
its canonical SQLite store (SessionDB → state.db) and its opt-in JSON snapshot
(AIAgent._save_session_log → sessions/session_<id>.json).

usage: python hermes_files.py OUT_DIR CWD
"""

import sys
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

from hermes_state import SessionDB
from run_agent import AIAgent

TURNS = [("user", "remember my editor is helix"), ("assistant", "Noted: helix.")]


def state_db_write(out: Path, cwd: str) -> None:
    db = SessionDB(db_path=out / "state.db")
    db.create_session("20261201_090000_aaaaaa", "cli", model="m", cwd=cwd)
    for role, content in TURNS:
        db.append_message("20261201_090000_aaaaaa", role, content)
    db.append_message("20261201_090000_aaaaaa", "tool", "{}", tool_call_id="t1", tool_name="x")
    db.end_session("20261201_090000_aaaaaa", "cli_close")
    db.close()


def json_snapshot_write(out: Path) -> None:
    agent = SimpleNamespace(
        _session_json_enabled=True,
        _session_messages=[],
        session_id="20261201_100000_bbbbbb",
        logs_dir=out / "sessions",
        model="m",
        base_url="http://127.0.0.1:1",
        platform="cli",
        session_start=datetime(2026, 12, 1, 10, 0, 0),
        _cached_system_prompt="you are hermes",
        tools=[],
        verbose_logging=True,
        _clean_session_content=AIAgent._clean_session_content,
        _redact_message_content=AIAgent._redact_message_content,
    )
    agent.logs_dir.mkdir(parents=True, exist_ok=True)
    messages = [{"role": "system", "content": "you are hermes"}]
    messages += [{"role": role, "content": content} for role, content in TURNS]
    AIAgent._save_session_log(agent, messages)


if __name__ == "__main__":
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    state_db_write(target, sys.argv[2])
    json_snapshot_write(target)
