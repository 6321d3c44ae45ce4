"""Tideline as a Hermes Agent memory provider (a MemoryProvider plugin).

Install: copy this directory to `$HERMES_HOME/plugins/tideline/` (`./tideline manage
hermes_install` does it), set `memory.provider: tideline` in config.yaml (`hermes memory setup`
asks for the URL and key), keep Tideline running (`./tideline up`).

What Hermes calls, and what Tideline does with it:
  initialize            → starts fetching the session-start block in the background
  system_prompt_block   → that block (T0 identity, T2 prefetch, T2b bridge, T3 memory map)
  prefetch(query)       → the per-turn block (T1/T4) for this user message, without recording it
  sync_turn             → the user and assistant turns into Tideline's raw timeline
  on_session_end        → a final sync of every turn not yet delivered
  on_delegation         → nothing: a subagent's work is not the owner's conversation
  tools                 → search, write a narrative, write a fact

A non-primary agent context (subagent, cron, flush) gets no injection and captures nothing.
Standard library only: this file runs inside Hermes' environment, not Tideline's.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import logging
import os
import socket
import threading
import time
import urllib.parse
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from agent.memory_provider import MemoryProvider

logger = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:8000"
RUNTIME = "hermes"
SYNCED_ROLES = ("user", "assistant")
# Below MemoryManager's 8 s prefetch deadline, so a slow server costs one empty block, not a stall.
# It bounds a whole request (connect, send, headers and body), and a whole delivery of queued turns.
REQUEST_TIMEOUT_SECONDS = 6.0
SESSION_START_WAIT_SECONDS = 10.0
PREFETCH_CACHE_SIZE = 32
MAX_RESPONSE_BYTES = 4_000_000
# The server's limits: a turn's length (characters), turns per request, a request body's bytes
# (its 1 MB, less room for the session fields).
MAX_TURN_CHARS = 100_000
MAX_TURNS_PER_REQUEST = 500
MAX_TURNS_BODY_BYTES = 900_000
MAX_TURN_ID_CHARS = 200
SEARCH_LIMIT_DEFAULT, SEARCH_LIMIT_MAX = 8, 50

TOOL_SCHEMAS = [
    {
        "name": "tideline_search",
        "description": (
            "Search Tideline's long-term memory (keywords and meaning) in this project and "
            "globally. Returns memories with their ids, kinds and scopes."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to look for"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 8},
            },
            "required": ["query"],
        },
    },
    {
        "name": "tideline_write_narrative",
        "description": (
            "Remember something that happened: one readable sentence (gesture), optionally the "
            "backdrop (context) and a verbatim quote (moment)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "gesture": {"type": "string", "description": "what happened, one sentence"},
                "context": {"type": "string"},
                "moment": {"type": "string", "description": "a verbatim quote"},
                "cognition_direction": {"type": "string"},
                "importance": {"type": "integer", "minimum": 1, "maximum": 5},
                "layer": {"type": "string", "enum": ["fact", "experience", "decision"]},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["gesture"],
        },
    },
    {
        "name": "tideline_write_fact",
        "description": (
            "Record a stable fact or preference about someone (usually the user) under a stable "
            "key; a new value replaces the old one."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "profile_name": {"type": "string", "description": "whom it is about, e.g. user"},
                "kind": {
                    "type": "string",
                    "enum": [
                        "preference",
                        "fact",
                        "episode",
                        "reflection",
                        "impression",
                        "relationship",
                    ],
                },
                "predicate": {"type": "string", "description": "stable key, e.g. editor"},
                "value": {"type": "string", "description": "at most 60 characters"},
                "summary": {"type": "string", "description": "one readable sentence"},
            },
            "required": ["profile_name", "kind", "predicate", "value"],
        },
    },
]


class TidelineError(Exception):
    """Tideline answered with an error, or could not be reached. `retryable`: the same request may
    succeed later (unreachable, timed out, 5xx, 429, a redirect or an odd answer from something in
    between); otherwise Tideline refused this request as such and sending it again cannot help."""

    def __init__(self, message: str, *, retryable: bool = True):
        super().__init__(message)
        self.retryable = retryable


def clean_text(text: str) -> str:
    """The text with any lone surrogate (which UTF-8 cannot carry) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


def turn_id_for(*, session_id: str, role: str, content: str, occurrence: int) -> str:
    """A stable id per (role, text, n-th time said in this session), so that sync_turn and the
    final sync of the whole transcript name the same turn the same way and Tideline skips
    what it already has. Within the server's limit whatever the session id's length."""
    digest = hashlib.sha256(f"{role}\0{content}".encode()).hexdigest()[:20]
    turn_id = f"{session_id}:{digest}:{occurrence}"
    if len(turn_id) <= MAX_TURN_ID_CHARS:
        return turn_id
    # Cutting the whole id would cut the digest and occurrence, the part that tells this
    # session's turns apart; the session id is cut instead, tagged with its own hash. Ids that
    # fit stay as they were, so re-sending an existing history still matches what was stored.
    turn = f":{digest}:{occurrence}"
    tag = "~" + hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return session_id[: MAX_TURN_ID_CHARS - len(turn) - len(tag)] + tag + turn


def message_text(content: Any) -> str:
    """OpenAI-style message content (a string, or a list of parts) as plain text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text")
        )
    return ""


class TidelineClient:
    """The few REST calls the provider makes, with the key as a bearer token. Redirects are never
    followed: they would carry the key to another origin (and turn a POST into a GET)."""

    def __init__(self, *, base_url: str, api_key: str, timeout: float = REQUEST_TIMEOUT_SECONDS):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def call(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        *,
        timeout: float | None = None,
        **query: Any,
    ) -> Any:
        """The JSON answer to one request, all of it within one deadline."""
        where = f"{method} {path}"
        url = urllib.parse.urlsplit(f"{self.base_url}{path}")
        target = url.path or "/"
        if query:
            target += "?" + urllib.parse.urlencode(
                {k: v for k, v in query.items() if v is not None}
            )
        if url.scheme not in ("http", "https") or not url.hostname:
            raise TidelineError(f"{where}: TIDELINE_URL must be http(s)://host[:port]")
        # UTF-8 rather than \u escapes: a CJK character costs 3 bytes of the body limit, not 6.
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8", "replace")
        seconds = self.timeout if timeout is None else min(timeout, self.timeout)
        deadline = time.monotonic() + seconds
        kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        try:
            connection = kind(url.hostname, url.port, timeout=seconds)
        except ValueError as exc:  # a bad port
            raise TidelineError(f"{where}: {exc}") from exc
        # Socket timeouts bound each read, not the whole answer: past the deadline the socket is
        # shut, so a server that drips its answer ends in an error, not a stall.
        watchdog = None
        try:
            connection.connect()
            # The socket itself: the connection lets go of it once the answer's headers are in.
            watchdog = threading.Timer(deadline - time.monotonic(), _shut, (connection.sock,))
            watchdog.daemon = True
            watchdog.start()
            connection.request(
                method,
                target,
                body=data,
                headers={
                    "Authorization": f"Bearer {self.api_key}",
                    "Content-Type": "application/json",
                    "Accept": "application/json",
                },
            )
            response = connection.getresponse()
            payload = response.read(MAX_RESPONSE_BYTES + 1)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            late = time.monotonic() >= deadline
            raise TidelineError(f"{where}: {'timed out' if late else exc}") from exc
        finally:
            if watchdog is not None:
                watchdog.cancel()
            connection.close()
        if time.monotonic() >= deadline:
            raise TidelineError(f"{where}: timed out")
        if not 200 <= response.status < 300:
            detail = payload[:500].decode(errors="replace")
            retryable = response.status >= 500 or response.status in (408, 429)
            retryable = retryable or 300 <= response.status < 400
            raise TidelineError(f"{where}: HTTP {response.status} {detail}", retryable=retryable)
        if len(payload) > MAX_RESPONSE_BYTES:
            raise TidelineError(f"{where}: answer larger than {MAX_RESPONSE_BYTES} bytes")
        try:
            return json.loads(payload)
        except (ValueError, RecursionError) as exc:
            raise TidelineError(f"{where}: the answer is not JSON") from exc


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


def _block(answer: Any) -> str:
    block = answer.get("block") if isinstance(answer, dict) else None
    return block if isinstance(block, str) else ""


def _turn_chunks(turns: list[dict]) -> list[list[dict]]:
    """The turns in order, in requests the server accepts: at most MAX_TURNS_PER_REQUEST turns
    and MAX_TURNS_BODY_BYTES of them, as encoded."""
    chunks: list[list[dict]] = [[]]
    size = 0
    for turn in turns:
        cost = len(json.dumps(turn, ensure_ascii=False).encode()) + 2
        if chunks[-1] and (
            len(chunks[-1]) >= MAX_TURNS_PER_REQUEST or size + cost > MAX_TURNS_BODY_BYTES
        ):
            chunks.append([])
            size = 0
        chunks[-1].append(turn)
        size += cost
    return [chunk for chunk in chunks if chunk]


def _runs(queued: list[tuple[dict, dict]]) -> list[tuple[dict, list[dict]]]:
    """The queued (where, turn) pairs in order, as runs of turns said in the same place."""
    runs: list[tuple[dict, list[dict]]] = []
    for where, turn in queued:
        if runs and runs[-1][0] == where:
            runs[-1][1].append(turn)
        else:
            runs.append((where, [turn]))
    return runs


def _agent_cwd() -> str:
    configured = os.environ.get("TIDELINE_CWD", "").strip()
    if configured:
        return configured
    try:
        from agent.runtime_cwd import resolve_agent_cwd
    except ImportError:
        return os.getcwd()
    return str(resolve_agent_cwd())


class TidelineMemoryProvider(MemoryProvider):
    """Tideline over REST: injection at session start and per turn, raw turns synced back."""

    def __init__(self) -> None:
        self._client: TidelineClient | None = None
        self._session_id = ""
        self._cwd = ""
        self._primary = True
        # Each turn with where it was said (session, runtime, cwd): a session switch while
        # Tideline is down must not move the earlier session's turns into the new one.
        self._pending: list[tuple[dict, dict]] = []
        self._said: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._session_block: Future | None = None
        self._prefetched: dict[str, str] = {}

    @property
    def name(self) -> str:
        return "tideline"

    # -- configuration -----------------------------------------------------------------------

    def is_available(self) -> bool:
        return bool(os.environ.get("TIDELINE_API_KEY", "").strip())

    def get_config_schema(self) -> list[dict[str, Any]]:
        return [
            {
                "key": "api_key",
                "description": "Tideline API key (./tideline manage apikey create …)",
                "secret": True,
                "required": True,
                "env_var": "TIDELINE_API_KEY",
            },
            {
                "key": "url",
                "description": "Tideline server URL",
                "default": DEFAULT_URL,
                "env_var": "TIDELINE_URL",
            },
            {
                "key": "cwd",
                "description": "Project directory to remember in (blank: the agent's cwd)",
                "default": "",
                "env_var": "TIDELINE_CWD",
            },
        ]

    # -- lifecycle ---------------------------------------------------------------------------

    def initialize(self, session_id: str, **kwargs: Any) -> None:
        self._client = TidelineClient(
            base_url=os.environ.get("TIDELINE_URL", "").strip() or DEFAULT_URL,
            api_key=os.environ.get("TIDELINE_API_KEY", "").strip(),
        )
        self._primary = kwargs.get("agent_context", "primary") == "primary"
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tideline")
        self._begin(session_id)

    def _begin(self, session_id: str) -> None:
        cwd = _agent_cwd()
        with self._lock:
            # With the counts, under the lock: a turn queued meanwhile gets one place, whole.
            self._session_id, self._cwd = session_id, cwd
            self._said.clear()
            self._prefetched.clear()
        self._session_block = None
        if self._primary and self._executor is not None:
            self._session_block = self._executor.submit(self._fetch_session_block)

    def _where(self) -> dict:
        return {"session_id": self._session_id, "runtime": RUNTIME, "cwd": self._cwd}

    def _fetch_session_block(self) -> str:
        return _block(self._client.call("POST", "/api/v1/session/start", self._where()))

    def system_prompt_block(self) -> str:
        if not self._primary or self._session_block is None:
            return ""
        try:
            return self._session_block.result(timeout=SESSION_START_WAIT_SECONDS)
        except Exception as exc:
            logger.warning("Tideline session-start block unavailable: %s", exc)
            return ""

    def prefetch(self, query: str, *, session_id: str = "") -> str:
        """The per-turn block. Hermes runs this on its own thread with a deadline; a repeated
        query (a retried turn) is answered from the cache without a request."""
        if not self._primary or not isinstance(query, str) or not query.strip():
            return ""
        if self._client is None:
            return ""
        with self._lock:
            if query in self._prefetched:
                return self._prefetched[query]
        content = clean_text(query)[:MAX_TURN_CHARS]
        try:
            answer = self._client.call(
                "POST", "/api/v1/turn", {**self._where(), "content": content, "record": False}
            )
        except Exception as exc:
            logger.warning("Tideline prefetch failed: %s", exc)
            return ""
        block = _block(answer)
        with self._lock:
            if len(self._prefetched) >= PREFETCH_CACHE_SIZE:
                self._prefetched.pop(next(iter(self._prefetched)))
            self._prefetched[query] = block
        return block

    def _queue(self, role: str, content: str) -> None:
        """Queue a turn as the server takes it, with where it is said (the caller holds the
        lock); the id is still that of the whole text."""
        key = (role, content)
        occurrence = self._said.get(key, 0)
        self._said[key] = occurrence + 1
        turn = {
            "role": role,
            "content": content[:MAX_TURN_CHARS],
            "turn_id": turn_id_for(
                session_id=self._session_id, role=role, content=content, occurrence=occurrence
            ),
        }
        self._pending.append((self._where(), turn))

    def _deliver(self) -> None:
        """Send every pending turn, in order, each under the session and cwd it was said in, in
        chunks the server accepts, within one request's time. What could not be sent for a
        passing reason (down, slow, 5xx) stays pending for the next sync; a chunk Tideline
        refused as such (4xx) is dropped, or it would block every later sync of the session."""
        with self._lock:
            batch, self._pending = self._pending, []
        if not batch or self._client is None:
            return
        deadline = time.monotonic() + self._client.timeout
        sends = [(where, chunk) for where, run in _runs(batch) for chunk in _turn_chunks(run)]
        for at, (where, chunk) in enumerate(sends):
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TidelineError("no time left for this sync")
                self._client.call("POST", "/api/v1/turns", {**where, "turns": chunk}, timeout=left)
            except TidelineError as exc:
                if not exc.retryable:
                    logger.warning("Tideline refused %d turn(s), dropped: %s", len(chunk), exc)
                    continue
                logger.warning("Tideline sync failed, will retry: %s", exc)
                kept = [(place, turn) for place, rest in sends[at:] for turn in rest]
                with self._lock:
                    self._pending = kept + self._pending
                return

    def sync_turn(
        self,
        user_content: str,
        assistant_content: str,
        *,
        session_id: str = "",
        messages: list[dict[str, Any]] | None = None,
    ) -> None:
        """Hermes calls this on its serialised background worker, so it may block briefly."""
        if not self._primary or self._client is None:
            return
        try:
            with self._lock:
                for role, content in (("user", user_content), ("assistant", assistant_content)):
                    text = clean_text(message_text(content))
                    if text.strip():
                        self._queue(role, text)
            self._deliver()
        except Exception as exc:
            logger.warning("Tideline sync failed: %s", exc)

    def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        """Final sync: the whole transcript, under the same turn ids, so only what never
        arrived is added."""
        if not self._primary or self._client is None:
            return
        try:
            with self._lock:
                said_here: dict[tuple[str, str], int] = {}
                for message in messages if isinstance(messages, list) else []:
                    role = message.get("role") if isinstance(message, dict) else None
                    text = message_text(message.get("content")) if role in SYNCED_ROLES else ""
                    text = clean_text(text)
                    if not text.strip():
                        continue
                    occurrence = said_here.get((role, text), 0)
                    said_here[(role, text)] = occurrence + 1
                    if occurrence >= self._said.get((role, text), 0):
                        self._queue(role, text)
            self._deliver()
        except Exception as exc:
            logger.warning("Tideline final sync failed: %s", exc)

    def on_session_switch(self, new_session_id: str, **kwargs: Any) -> None:
        try:
            self._deliver()
        except Exception as exc:
            logger.warning("Tideline sync failed: %s", exc)
        self._begin(new_session_id)

    def on_delegation(self, task: str, result: str, *, child_session_id: str = "", **kwargs):
        """A subagent's task and result are not the owner's conversation: nothing is captured."""

    def shutdown(self) -> None:
        try:
            self._deliver()
        except Exception as exc:
            logger.warning("Tideline sync failed: %s", exc)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # -- tools -------------------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return TOOL_SCHEMAS

    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        try:
            return json.dumps(
                self._tool(tool_name, args if isinstance(args, dict) else {}), ensure_ascii=False
            )
        except Exception as exc:
            return json.dumps({"error": str(exc)})

    def _tool(self, tool_name: str, args: dict[str, Any]) -> Any:
        if self._client is None:
            raise TidelineError("the Tideline provider is not initialised")
        if tool_name == "tideline_search":
            try:
                limit = int(args.get("limit") or SEARCH_LIMIT_DEFAULT)
            except (TypeError, ValueError):
                limit = SEARCH_LIMIT_DEFAULT
            hits = self._client.call(
                "GET",
                "/api/v1/search",
                q=str(args.get("query", "")),
                limit=min(max(limit, 1), SEARCH_LIMIT_MAX),
                cwd=self._cwd,
            )
            return [shown for shown in map(_hit, hits) if shown] if isinstance(hits, list) else []
        if tool_name in ("tideline_write_narrative", "tideline_write_fact"):
            if not self._primary:
                raise TidelineError("a non-primary agent context does not write memories")
            path = "/api/v1/narratives" if tool_name.endswith("narrative") else "/api/v1/facts"
            # Only what the tool declares: the project is the provider's, never the model's.
            declared = next(s for s in TOOL_SCHEMAS if s["name"] == tool_name)["parameters"]
            body = {k: v for k, v in args.items() if k in declared["properties"]}
            return self._client.call("POST", path, {**body, "cwd": self._cwd})
        raise TidelineError(f"unknown tool {tool_name}")


def _hit(hit: Any) -> dict | None:
    """A search hit as the model sees it, or None for a shape this provider does not know."""
    memory = hit.get("memory") if isinstance(hit, dict) else None
    if not isinstance(memory, dict):
        return None
    score = hit.get("score")
    return {
        "id": memory.get("id"),
        "type": memory.get("type"),
        "text": memory.get("summary") or memory.get("gesture"),
        "scope": memory.get("scope"),
        "score": round(score, 3) if isinstance(score, (int, float)) else None,
    }


def register(ctx) -> None:
    """Hermes' plugin entry: hand the loader one provider instance."""
    ctx.register_memory_provider(TidelineMemoryProvider())
