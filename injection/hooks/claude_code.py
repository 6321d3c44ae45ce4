#!/usr/bin/env python3
"""Tideline hook for Claude Code: SessionStart and UserPromptSubmit inject memory, Stop syncs turns.

Standalone and standard-library only (no Django, no third-party imports, no urllib: raw sockets keep
start-up well under 100 ms), and Python 3.9+ (macOS' /usr/bin/python3). Whatever happens —
Tideline down or stalling, no key, garbage on stdin — it prints valid hook JSON and exits 0 within
its deadline, so it can never break a session; an error only means nothing is injected this turn,
and the server's reason is printed on stderr. It reads no transcript itself: Stop sends the
transcript's newest raw lines and the server picks out the conversation.

Configuration (environment, e.g. the `env` block of Claude Code's settings.json):
  TIDELINE_URL           default http://127.0.0.1:8000
  TIDELINE_API_KEY       a key from `manage.py apikey create` (without it nothing is sent)
  TIDELINE_HOOK_TIMEOUT  seconds per request (connect, send and the whole answer), default 3
  TIDELINE_HOOK_START_TIMEOUT  seconds for SessionStart, default 15 (a server that has just started
                         is still loading its embedder and indexes; a session starts once)
  A timeout that is not a number of seconds in (0, 3600] is named on stderr and the default used.
Usage: claude_code.py [SessionStart|UserPromptSubmit|Stop]  (else read from the hook input)
Any other event (SubagentStop, PreCompact, …) is answered with {}: nothing to add.
"""

from __future__ import annotations

import errno
import json
import math
import os
import socket
import stat
import sys
import time

RUNTIME = "claude_code"
MAX_STDIN_BYTES = 2_000_000
MAX_RESPONSE_BYTES = 4_000_000
# The Stop hook re-sends the transcript's tail; the server skips turns it already holds, so only
# the newest lines need to travel, within the server's 1 MB body limit (counted as sent: UTF-8
# with JSON escapes), leaving room for the session fields.
SYNC_TAIL_LINES = 400
SYNC_TAIL_BYTES = 800_000
# How much of the transcript's end is read: the budget several times over, so that one newest line
# too large to send (a huge tool output) still leaves the earlier lines to sync.
SYNC_READ_BYTES = 4_000_000
MAX_TURN_CHARS = 100_000
# Longer than any hook may sensibly hold a session; beyond it a setting is a typo (inf, 1e20), and
# the socket cannot take it anyway.
MAX_TIMEOUT_SECONDS = 3600.0


class TidelineUnavailable(Exception):
    pass


def _seconds(name: str, default: float) -> float:
    """The setting, or the default (said on stderr) when it is not a usable number of seconds."""
    raw = os.environ.get(name, "")
    try:
        seconds = float(raw or default)
    except ValueError:
        seconds = math.nan
    if 0 < seconds <= MAX_TIMEOUT_SECONDS:  # also false for nan
        return seconds
    sys.stderr.write(
        f"tideline hook: {name}={raw!r} is not seconds in (0, {MAX_TIMEOUT_SECONDS:g}];"
        f" using {default:g}\n"
    )
    return default


def _encoded(value) -> bytes:
    """JSON as sent: UTF-8 (a CJK character costs 3 bytes, not a 6-byte escape); a lone surrogate,
    which UTF-8 cannot carry, becomes '?'."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "replace")


def _address(hostport: str) -> tuple[str, int]:
    """host and port of `host[:port]` or `[v6][:port]`."""
    if hostport.startswith("["):
        host, _, port = hostport[1:].partition("]")
        port = port[1:] if port.startswith(":") else ""
    else:
        host, _, port = hostport.partition(":")
    # Digits only, and in range: socket calls take 99999 as 34463 (mod 65536), another server.
    if port and not (port.isascii() and port.isdigit() and 0 < int(port) <= 65535):
        raise TidelineUnavailable(f"TIDELINE_URL has a bad port (not 1-65535): {hostport}")
    return host, int(port or 80)


def _printable(text: str) -> bool:
    """No space or control character, so it cannot end a header line or add one."""
    return all(" " < char <= "~" for char in text)


def post(path: str, body: dict, *, timeout: float | None = None) -> dict:
    """POST JSON to Tideline over a plain socket (HTTP/1.0: the server closes when done), all of
    it within one deadline: a server that answers a byte at a time cannot hold the session."""
    key = os.environ.get("TIDELINE_API_KEY", "").strip()
    if not key or not _printable(key):
        raise TidelineUnavailable("TIDELINE_API_KEY is not set (or not a single-line key)")
    base = os.environ.get("TIDELINE_URL", "http://127.0.0.1:8000").strip().rstrip("/")
    deadline = time.monotonic() + (timeout or _seconds("TIDELINE_HOOK_TIMEOUT", 3))
    if not base.startswith("http://") or not _printable(base):
        raise TidelineUnavailable("TIDELINE_URL must be http://host:port (a local server)")
    hostport, _, prefix = base[len("http://") :].partition("/")
    address = _address(hostport)
    data = _encoded(body)
    head = (
        f"POST /{prefix + '/' if prefix else ''}{path.lstrip('/')} HTTP/1.0\r\n"
        f"Host: {hostport}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n"
    ).encode()
    chunks, size = [], 0
    try:
        with socket.create_connection(address, timeout=_left(deadline)) as sock:
            sock.settimeout(_left(deadline))
            sock.sendall(head + data)
            while True:
                sock.settimeout(_left(deadline))
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise TidelineUnavailable(f"answer larger than {MAX_RESPONSE_BYTES} bytes")
    # socket.timeout, not TimeoutError: they are one class only from Python 3.10.
    except socket.timeout:  # noqa: UP041
        raise TidelineUnavailable("timed out") from None
    status_line, _, rest = b"".join(chunks).partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or parts[1] != b"200":
        raise TidelineUnavailable(
            f"{status_line.decode('latin-1', 'replace')}: {_detail(payload)}".rstrip(": ")
        )
    try:
        answer = json.loads(payload)
    except (ValueError, RecursionError):
        raise TidelineUnavailable("the answer is not JSON") from None
    return answer if isinstance(answer, dict) else {}


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise socket.timeout("deadline passed")  # noqa: UP041 (3.9: see post)
    return left


def _detail(payload: bytes) -> str:
    """The server's reason for an error answer, for stderr."""
    try:
        detail = json.loads(payload).get("detail", "")
    except (ValueError, AttributeError, RecursionError):
        return ""
    return json.dumps(detail) if not isinstance(detail, str) else detail


def transcript_tail(path: str) -> list[str]:
    """The transcript's newest lines, oldest first, as many as fit the request. Only the end of a
    regular file is read: a transcript can be huge, and a device or a fifo never ends (opened
    non-blocking, so a fifo without a writer cannot hold the open either)."""
    path = os.path.expanduser(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        # A directory is a wrong path, worth saying (opening its fd would name the fd, not it).
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        return []
    with open(fd, "rb") as transcript:
        start = max(0, info.st_size - SYNC_READ_BYTES)
        transcript.seek(start)
        raw = transcript.read(SYNC_READ_BYTES).split(b"\n")
    if start > 0:
        raw = raw[1:]  # cut mid-line by the window
    lines = [line.decode("utf-8", "replace").rstrip("\r") for line in raw][-SYNC_TAIL_LINES:]
    tail, size = [], 0
    for line in reversed(lines):
        cost = len(_encoded(line)) + 2  # the separating ", "
        if cost > SYNC_TAIL_BYTES:
            continue  # can never be sent; the lines before it still can
        if size + cost > SYNC_TAIL_BYTES:
            break
        size += cost
        tail.append(line)
    return tail[::-1]


def session_fields(payload: dict) -> dict:
    """Where this hook runs. An input without a session id (not Claude Code's, or unreadable)
    sends nothing: every such hook would share one made-up session."""
    session_id = payload.get("session_id")
    if not isinstance(session_id, str) or not session_id.strip():
        raise TidelineUnavailable("the hook input names no session_id: nothing sent")
    return {
        "session_id": session_id[:200],
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
    fields = session_fields(payload)
    lines = [line for line in transcript_tail(path) if line.strip()]
    if lines:
        post("/api/v1/transcripts", {**fields, "lines": lines})
    return ""


HANDLERS = {"SessionStart": on_session_start, "UserPromptSubmit": on_prompt, "Stop": on_stop}


def output(event: str, context: str) -> str:
    """The hook's answer, ASCII only (non-ASCII as JSON escapes): it is valid JSON whatever the
    block holds, even a lone surrogate, and writable whatever stdout's encoding."""
    if event == "Stop":
        # Stop hooks take no additional context; this says "nothing to show, carry on".
        return json.dumps({"suppressOutput": True})
    if event not in HANDLERS:
        return "{}"
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}}
    )


def main(argv: list[str]) -> int:
    context = ""
    try:
        payload = json.loads(sys.stdin.buffer.read(MAX_STDIN_BYTES) or b"{}")
    except (ValueError, OSError, RecursionError):
        payload = {}
    if not isinstance(payload, dict):
        payload = {}
    # Claude Code names the event in its input; the argument covers an unreadable input.
    named = payload.get("hook_event_name")
    event = named if isinstance(named, str) and named else (argv[1] if len(argv) > 1 else "")
    try:
        if event in HANDLERS:
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
