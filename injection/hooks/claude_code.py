#!/usr/bin/env python3
"""Tideline hook for Claude Code: SessionStart and UserPromptSubmit inject memory, Stop syncs turns.

Standalone and standard-library only (no Django, no third-party imports, no urllib: raw sockets keep
start-up well under 100 ms). Whatever happens — Tideline down, no key, garbage on stdin — it prints
valid hook JSON and exits 0, so it can never break a session; an error only means nothing is
injected this turn, and the server's reason is printed on stderr. It reads no transcript itself:
Stop sends the transcript's newest raw lines and the server picks out the conversation.

Configuration (environment, e.g. the `env` block of Claude Code's settings.json):
  TIDELINE_URL           default http://127.0.0.1:8000
  TIDELINE_API_KEY       a key from `manage.py apikey create` (without it nothing is sent)
  TIDELINE_HOOK_TIMEOUT  seconds per request, default 3
  TIDELINE_HOOK_START_TIMEOUT  seconds for SessionStart, default 15 (a server that has just started
                         is still loading its embedder and indexes; a session starts once)
Usage: claude_code.py [SessionStart|UserPromptSubmit|Stop]  (else read from the hook input)
"""

import json
import os
import socket
import sys

EVENTS = ("SessionStart", "UserPromptSubmit", "Stop")
RUNTIME = "claude_code"
MAX_STDIN_BYTES = 2_000_000
MAX_RESPONSE_BYTES = 4_000_000
# The Stop hook re-sends the transcript's tail; the server skips turns it already holds, so only
# the newest lines need to travel, within the server's 1 MB body limit.
SYNC_TAIL_LINES = 400
SYNC_TAIL_BYTES = 800_000
MAX_TURN_CHARS = 100_000


class TidelineUnavailable(Exception):
    pass


def _seconds(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


def post(path: str, body: dict, *, timeout: float | None = None) -> dict:
    """POST JSON to Tideline over a plain socket (HTTP/1.0: the server closes when done)."""
    key = os.environ.get("TIDELINE_API_KEY", "").strip()
    if not key:
        raise TidelineUnavailable("TIDELINE_API_KEY is not set")
    base = os.environ.get("TIDELINE_URL", "http://127.0.0.1:8000").strip().rstrip("/")
    timeout = timeout or _seconds("TIDELINE_HOOK_TIMEOUT", 3)
    if not base.startswith("http://"):
        raise TidelineUnavailable("TIDELINE_URL must be http://host:port (a local server)")
    hostport, _, prefix = base[len("http://") :].partition("/")
    host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "80")
    data = json.dumps(body).encode()
    head = (
        f"POST /{prefix + '/' if prefix else ''}{path.lstrip('/')} HTTP/1.0\r\n"
        f"Host: {hostport}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode()
    chunks, size = [], 0
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
        sock.sendall(head + data)
        while size <= MAX_RESPONSE_BYTES:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    status_line, _, rest = b"".join(chunks).partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or parts[1] != b"200":
        raise TidelineUnavailable(
            f"{status_line.decode('latin-1', 'replace')}: {_detail(payload)}".rstrip(": ")
        )
    return json.loads(payload)


def _detail(payload: bytes) -> str:
    """The server's reason for an error answer, for stderr."""
    try:
        detail = json.loads(payload).get("detail", "")
    except (ValueError, AttributeError):
        return ""
    return json.dumps(detail, ensure_ascii=False) if not isinstance(detail, str) else detail


def transcript_tail(path: str) -> list[str]:
    """The transcript's newest lines, oldest first, as many as fit the request."""
    with open(os.path.expanduser(path), encoding="utf-8", errors="replace") as transcript:
        lines = [line.rstrip("\n") for line in transcript][-SYNC_TAIL_LINES:]
    tail, size = [], 0
    for line in reversed(lines):
        size += len(line.encode()) + 8
        if size > SYNC_TAIL_BYTES:
            break
        tail.append(line)
    return tail[::-1]


def session_fields(payload: dict) -> dict:
    return {
        "session_id": str(payload.get("session_id") or "unknown")[:200],
        "runtime": RUNTIME,
        "cwd": str(payload.get("cwd") or os.getcwd())[:1024],
    }


def on_session_start(payload: dict) -> str:
    timeout = _seconds("TIDELINE_HOOK_START_TIMEOUT", 15)
    return post("/api/v1/session/start", session_fields(payload), timeout=timeout).get("block", "")


def on_prompt(payload: dict) -> str:
    prompt = payload.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return ""
    # Only the block: the Stop hook records this prompt under its transcript uuid, so recording
    # it here too would store it twice.
    body = {**session_fields(payload), "content": prompt[:MAX_TURN_CHARS], "record": False}
    return post("/api/v1/turn", body).get("block", "")


def on_stop(payload: dict) -> str:
    path = payload.get("transcript_path")
    if not isinstance(path, str) or not path:
        return ""
    lines = [line for line in transcript_tail(path) if line.strip()]
    if lines:
        post("/api/v1/transcripts", {**session_fields(payload), "lines": lines})
    return ""


HANDLERS = {"SessionStart": on_session_start, "UserPromptSubmit": on_prompt, "Stop": on_stop}


def output(event: str, context: str) -> str:
    if event == "Stop":
        # Stop hooks take no additional context; this says "nothing to show, carry on".
        return json.dumps({"suppressOutput": True})
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}},
        ensure_ascii=False,
    )


def main(argv: list[str]) -> int:
    event = argv[1] if len(argv) > 1 and argv[1] in EVENTS else ""
    context = ""
    try:
        payload = json.loads(sys.stdin.buffer.read(MAX_STDIN_BYTES) or b"{}")
        if not isinstance(payload, dict):
            payload = {}
    except (ValueError, OSError):
        payload = {}
    if not event:
        named = payload.get("hook_event_name")
        event = named if named in EVENTS else "UserPromptSubmit"
    try:
        context = HANDLERS[event](payload) or ""
        if not isinstance(context, str):
            context = ""
    except Exception as exc:
        sys.stderr.write(f"tideline hook: {type(exc).__name__}: {exc}\n")
    sys.stdout.write(output(event, context) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
