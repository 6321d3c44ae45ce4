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

import hashlib
import json
import logging
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from agent.memory_provider import MemoryProvider

logger = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:8000"
RUNTIME = "hermes"
SYNCED_ROLES = ("user", "assistant")
# Below MemoryManager's 8 s prefetch deadline, so a slow server costs one empty block, not a stall.
REQUEST_TIMEOUT_SECONDS = 6.0
SESSION_START_WAIT_SECONDS = 10.0
PREFETCH_CACHE_SIZE = 32

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
    """Tideline answered with an error, or could not be reached."""


def turn_id_for(*, session_id: str, role: str, content: str, occurrence: int) -> str:
    """A stable id per (role, text, n-th time said in this session), so that sync_turn and the
    final sync of the whole transcript name the same turn the same way and Tideline skips
    what it already has."""
    digest = hashlib.sha256(f"{role}\0{content}".encode()).hexdigest()[:20]
    return f"{session_id}:{digest}:{occurrence}"[:200]


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
    """The few REST calls the provider makes, with the key as a bearer token."""

    def __init__(self, *, base_url: str, api_key: str, timeout: float = REQUEST_TIMEOUT_SECONDS):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def call(self, method: str, path: str, body: dict | None = None, **query: Any) -> Any:
        url = f"{self.base_url}{path}"
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        request = urllib.request.Request(
            url,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={
                "Authorization": f"Bearer {self.api_key}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise TidelineError(f"{method} {path}: HTTP {exc.code} {detail}") from exc
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
            raise TidelineError(f"{method} {path}: {exc}") from exc


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
        self._pending: list[dict] = []
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
        self._session_id = session_id
        self._cwd = _agent_cwd()
        with self._lock:
            self._said.clear()
            self._prefetched.clear()
        self._session_block = None
        if self._primary and self._executor is not None:
            self._session_block = self._executor.submit(self._fetch_session_block)

    def _where(self) -> dict:
        return {"session_id": self._session_id, "runtime": RUNTIME, "cwd": self._cwd}

    def _fetch_session_block(self) -> str:
        body = self._client.call("POST", "/api/v1/session/start", self._where())
        return body.get("block", "")

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
        if not self._primary or not query.strip() or self._client is None:
            return ""
        with self._lock:
            if query in self._prefetched:
                return self._prefetched[query]
        try:
            body = self._client.call(
                "POST", "/api/v1/turn", {**self._where(), "content": query, "record": False}
            )
        except TidelineError as exc:
            logger.warning("Tideline prefetch failed: %s", exc)
            return ""
        block = body.get("block", "")
        with self._lock:
            if len(self._prefetched) >= PREFETCH_CACHE_SIZE:
                self._prefetched.pop(next(iter(self._prefetched)))
            self._prefetched[query] = block
        return block

    def _turn(self, role: str, content: str) -> dict:
        key = (role, content)
        occurrence = self._said.get(key, 0)
        self._said[key] = occurrence + 1
        return {
            "role": role,
            "content": content,
            "turn_id": turn_id_for(
                session_id=self._session_id, role=role, content=content, occurrence=occurrence
            ),
        }

    def _deliver(self) -> None:
        """Send every pending turn; on failure they stay pending for the next sync."""
        with self._lock:
            batch, self._pending = self._pending, []
        if not batch:
            return
        try:
            self._client.call("POST", "/api/v1/turns", {**self._where(), "turns": batch})
        except TidelineError as exc:
            logger.warning("Tideline sync failed, will retry: %s", exc)
            with self._lock:
                self._pending = batch + self._pending

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
        with self._lock:
            for role, content in (("user", user_content), ("assistant", assistant_content)):
                if content and content.strip():
                    self._pending.append(self._turn(role, content))
        self._deliver()

    def on_session_end(self, messages: list[dict[str, Any]]) -> None:
        """Final sync: the whole transcript, under the same turn ids, so only what never
        arrived is added."""
        if not self._primary or self._client is None:
            return
        with self._lock:
            said_here: dict[tuple[str, str], int] = {}
            for message in messages or []:
                role = message.get("role") if isinstance(message, dict) else None
                text = message_text(message.get("content")) if role in SYNCED_ROLES else ""
                if not text.strip():
                    continue
                occurrence = said_here.get((role, text), 0)
                said_here[(role, text)] = occurrence + 1
                if occurrence >= self._said.get((role, text), 0):
                    self._pending.append(self._turn(role, text))
        self._deliver()

    def on_session_switch(self, new_session_id: str, **kwargs: Any) -> None:
        if self._client is not None:
            self._deliver()
        self._begin(new_session_id)

    def on_delegation(self, task: str, result: str, *, child_session_id: str = "", **kwargs):
        """A subagent's task and result are not the owner's conversation: nothing is captured."""

    def shutdown(self) -> None:
        if self._client is not None:
            self._deliver()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # -- tools -------------------------------------------------------------------------------

    def get_tool_schemas(self) -> list[dict[str, Any]]:
        return TOOL_SCHEMAS

    def handle_tool_call(self, tool_name: str, args: dict[str, Any], **kwargs: Any) -> str:
        try:
            return json.dumps(self._tool(tool_name, args or {}), ensure_ascii=False)
        except TidelineError as exc:
            return json.dumps({"error": str(exc)})

    def _tool(self, tool_name: str, args: dict[str, Any]) -> Any:
        if self._client is None:
            raise TidelineError("the Tideline provider is not initialised")
        where = {"cwd": self._cwd}
        if tool_name == "tideline_search":
            hits = self._client.call(
                "GET",
                "/api/v1/search",
                q=str(args.get("query", "")),
                limit=int(args.get("limit") or 8),
                cwd=self._cwd,
            )
            return [
                {
                    "id": hit["memory"].get("id"),
                    "type": hit["memory"].get("type"),
                    "text": hit["memory"].get("summary") or hit["memory"].get("gesture"),
                    "scope": hit["memory"].get("scope"),
                    "score": round(hit.get("score", 0.0), 3),
                }
                for hit in hits
            ]
        if tool_name in ("tideline_write_narrative", "tideline_write_fact"):
            if not self._primary:
                raise TidelineError("a non-primary agent context does not write memories")
            path = "/api/v1/narratives" if tool_name.endswith("narrative") else "/api/v1/facts"
            return self._client.call("POST", path, {**where, **args})
        raise TidelineError(f"unknown tool {tool_name}")


def register(ctx) -> None:
    """Hermes' plugin entry: hand the loader one provider instance."""
    ctx.register_memory_provider(TidelineMemoryProvider())
