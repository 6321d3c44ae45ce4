"""The one OpenAI-compatible chat client Tideline uses (write-gate judge, inbox extraction, DREAM).

Configuration lives in a 0600 JSON file written by `manage.py llm set`; the key never reaches logs,
task arguments or error messages. Remote endpoints must use HTTPS: a key sent over plain HTTP is a
key given away, so plain HTTP is allowed only to loopback (a local Ollama).
"""

import ipaddress
import json
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from django.conf import settings

from memory.services.errors import InvalidInput

logger = logging.getLogger("tideline.llm")


class LLMUnavailable(Exception):
    """No LLM configured, or it failed (timeout, disconnect, HTTP error, invalid JSON). Callers fall
    back to the deterministic path; nothing bad is written."""


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


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def llm_url_validate(base_url: str) -> str:
    parsed = urlparse(base_url.strip())
    if parsed.scheme not in {"http", "https"} or not parsed.hostname:
        raise InvalidInput("base URL must be an http(s) URL such as https://api.example.com/v1")
    if parsed.scheme == "http" and not _is_loopback(parsed.hostname):
        raise InvalidInput(
            "a remote LLM endpoint must use HTTPS; plain HTTP is allowed only for loopback"
        )
    return base_url.strip().rstrip("/")


def _config_path() -> Path:
    return Path(settings.TIDELINE_LLM_CONFIG_FILE)


def llm_config_save(*, base_url: str, model: str, api_key: str) -> LLMConfig:
    base_url = llm_url_validate(base_url)
    if not model.strip():
        raise InvalidInput("model must not be empty")
    config = LLMConfig(base_url=base_url, model=model.strip(), api_key=api_key.strip())
    path = _config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Create with 0600 from the start so the key is never readable by others, even briefly.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(
            {"base_url": config.base_url, "model": config.model, "api_key": config.api_key}, handle
        )
    path.chmod(0o600)
    return config


def llm_config_load() -> LLMConfig | None:
    path = _config_path()
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
        return LLMConfig(
            base_url=llm_url_validate(raw["base_url"]),
            model=str(raw["model"]),
            api_key=os.environ.get("TIDELINE_LLM_API_KEY") or str(raw.get("api_key", "")),
        )
    except (OSError, ValueError, KeyError, TypeError, InvalidInput):
        logger.warning("LLM config at %s is unreadable; running without an LLM", path)
        return None


def _strip_fences(text: str) -> str:
    text = text.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    return text.strip()


def llm_complete_json(
    *, system: str, user: str, config: LLMConfig | None = None, timeout: float | None = None
) -> LLMReply:
    """One chat completion that must answer a JSON object. Raises LLMUnavailable on any failure."""
    config = config or llm_config_load()
    if config is None:
        raise LLMUnavailable("no LLM is configured (manage.py llm set)")
    body = json.dumps(
        {
            "model": config.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": 0,
            "response_format": {"type": "json_object"},
        }
    ).encode()
    request = urllib.request.Request(
        f"{config.base_url}/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"}
        | ({"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}),
        method="POST",
    )
    try:
        with urllib.request.urlopen(
            request, timeout=timeout or settings.TIDELINE_LLM_TIMEOUT
        ) as reply:
            payload = json.loads(reply.read().decode())
        content = payload["choices"][0]["message"]["content"]
        data = json.loads(_strip_fences(content))
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
        raise LLMUnavailable(f"LLM request failed: {type(exc).__name__}") from exc
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise LLMUnavailable("LLM answered something that is not the expected JSON") from exc
    if not isinstance(data, dict):
        raise LLMUnavailable("LLM answered JSON that is not an object")
    usage = payload.get("usage") or {}
    return LLMReply(
        data=data,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
    )
