"""The one OpenAI-compatible chat client Tideline uses (write-gate judge, inbox extraction, DREAM).

Configuration lives in a 0600 JSON file written by `manage.py llm set`; the key never reaches logs,
task arguments or error messages. Remote endpoints must use HTTPS: a key sent over plain HTTP is a
key given away, so plain HTTP is allowed only to loopback (a local Ollama).
"""

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memory.models import Actor, AuditAction
from memory.services.audit import audit_record
from memory.services.errors import InvalidInput
from memory.services.http_client import (
    HttpFailed,
    RetryPolicy,
    endpoint_url_validate,
    http_post_json,
    http_post_seconds_max,
)
from tideline_site.private_files import private_dir_ensure, private_file_write

logger = logging.getLogger("tideline.llm")

# A completion is not cheap and a slow one stays slow: retry only what says "try again"
# (overload, gateway trouble, no connection), never a timeout.
LLM_RETRY_STATUSES = frozenset({429, 502, 503, 504})
# A completion of even 100,000 tokens is well under 1 MB of JSON, escapes included: anything much
# larger is not an answer, and reading it would only cost memory.
LLM_RESPONSE_MAX_BYTES = 4 * 1024 * 1024
# No model reads or writes ten million tokens in one completion (the largest context windows hold
# about two million), so a larger count is a broken or hostile endpoint, not usage. It is treated
# as unreported (0), like a missing count, rather than clamped: a clamped count would be tokens
# nobody spent. This also keeps what DREAM adds up far inside PostgreSQL's integer (2**31 - 1).
TOKEN_COUNT_MAX = 10_000_000


class LLMUnavailable(Exception):
    """No LLM configured, or it failed (timeout, disconnect, HTTP error, invalid JSON). Callers fall
    back to the deterministic path; nothing bad is written."""


class LLMConfigInvalid(LLMUnavailable):
    """The LLM config file exists but cannot be used; the message says which field and how to fix
    it, and never repeats a value from the file (it may hold the key)."""


@dataclass(frozen=True)
class LLMConfig:
    base_url: str
    model: str
    api_key: str = ""

    def public(self) -> dict:
        """What may be shown to the owner: never the key itself."""
        return {"base_url": self.base_url, "model": self.model, "api_key_set": bool(self.api_key)}


@dataclass(frozen=True)
class LLMReply:
    data: dict
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class LLMConfigFile(BaseModel):
    """The shape of llm.json: strings only, nothing coerced (a number is not a URL)."""

    model_config = ConfigDict(strict=True, extra="ignore", str_strip_whitespace=True)

    base_url: str
    model: str = Field(min_length=1, max_length=200)
    api_key: str = Field("", max_length=4096)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        try:
            return endpoint_url_validate(value, what="base_url")
        except InvalidInput as exc:
            raise ValueError(str(exc)) from exc


def _validation_message(exc: ValidationError) -> str:
    # Field and reason only: pydantic's own text repeats the input, which may be the key.
    parts = []
    for error in exc.errors(include_input=False, include_url=False):
        field = ".".join(str(part) for part in error["loc"]) or "file"
        parts.append(f"{field}: {error['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


def _config_path() -> Path:
    return Path(settings.TIDELINE_LLM_CONFIG_FILE)


def llm_config_save(*, base_url: str, model: str, api_key: str) -> LLMConfig:
    try:
        checked = LLMConfigFile(base_url=base_url, model=model, api_key=api_key)
    except ValidationError as exc:
        raise InvalidInput(_validation_message(exc)) from exc
    config = LLMConfig(base_url=checked.base_url, model=checked.model, api_key=checked.api_key)
    try:
        before = llm_config_read()
    except LLMConfigInvalid:
        before = None
    path = _config_path()
    private_dir_ensure(path.parent)
    # 0600 from the first byte, so the key is never readable by others, even briefly.
    private_file_write(
        path,
        json.dumps({"base_url": config.base_url, "model": config.model, "api_key": config.api_key}),
    )
    # Where DREAM and the inbox send memory text is a decision; the key itself is never recorded.
    audit_record(
        actor=Actor.OWNER,
        action=AuditAction.UPDATE,
        target_type="llm_config",
        reason="LLM endpoint configured",
        before={"base_url": before.base_url, "model": before.model} if before else None,
        after={
            "base_url": config.base_url,
            "model": config.model,
            "api_key_set": bool(config.api_key),
        },
    )
    return config


def llm_config_read() -> LLMConfig | None:
    """The configured LLM, None when there is no config file. Raises LLMConfigInvalid with one
    clear message for a file that cannot be used."""
    path = _config_path()
    if not path.exists():
        return None
    fix = "fix it with `manage.py llm set --base-url URL --model M`"
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LLMConfigInvalid(
            f"the LLM config {path} is not readable JSON ({type(exc).__name__}); {fix}"
        ) from exc
    if not isinstance(raw, dict):
        raise LLMConfigInvalid(f"the LLM config {path} is not a JSON object; {fix}")
    try:
        checked = LLMConfigFile.model_validate(raw)
    except ValidationError as exc:
        raise LLMConfigInvalid(
            f"the LLM config {path} is invalid: {_validation_message(exc)}; {fix}"
        ) from exc
    return LLMConfig(
        base_url=checked.base_url,
        model=checked.model,
        api_key=os.environ.get("TIDELINE_LLM_API_KEY") or checked.api_key,
    )


def llm_config_load() -> LLMConfig | None:
    """The configured LLM, or None when there is none or its file is unusable (the reason is
    logged; `manage.py check` and `manage.py llm test` show it too)."""
    try:
        return llm_config_read()
    except LLMConfigInvalid as exc:
        logger.warning("%s; running without an LLM", exc)
        return None


def _strip_fences(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    return text.strip()


def _retry_policy() -> RetryPolicy:
    return RetryPolicy(
        retries=settings.TIDELINE_LLM_RETRIES, statuses=LLM_RETRY_STATUSES, on_timeout=False
    )


def llm_call_seconds_max() -> float:
    """The longest one `llm_complete_json` can take, retries and their backoff included."""
    return http_post_seconds_max(timeout=settings.TIDELINE_LLM_TIMEOUT, policy=_retry_policy())


def llm_complete_json(
    *, system: str, user: str, config: LLMConfig | None = None, timeout: float | None = None
) -> LLMReply:
    """One chat completion that must answer a JSON object. Raises LLMUnavailable on any failure."""
    config = config or llm_config_read()
    if config is None:
        raise LLMUnavailable("no LLM is configured (manage.py llm set)")
    body = {
        "model": config.model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "temperature": 0,
        "response_format": {"type": "json_object"},
    }
    try:
        payload = http_post_json(
            url=f"{config.base_url}/chat/completions",
            body=body,
            api_key=config.api_key,
            timeout=timeout or settings.TIDELINE_LLM_TIMEOUT,
            policy=_retry_policy(),
            max_bytes=LLM_RESPONSE_MAX_BYTES,
        )
    except HttpFailed as exc:
        raise LLMUnavailable(f"LLM request failed: {exc}") from exc
    try:
        content = payload["choices"][0]["message"]["content"]
        data = json.loads(_strip_fences(content))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
        # RecursionError: content nested deeper than the parser's stack is no answer either.
        raise LLMUnavailable("LLM answered something that is not the expected JSON") from exc
    if not isinstance(data, dict):
        raise LLMUnavailable("LLM answered JSON that is not an object")
    usage = payload.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return LLMReply(
        data=data,
        prompt_tokens=_token_count(usage.get("prompt_tokens")),
        completion_tokens=_token_count(usage.get("completion_tokens")),
    )


def _token_count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value if 0 <= value <= TOKEN_COUNT_MAX else 0
