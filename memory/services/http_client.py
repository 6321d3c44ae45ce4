"""The one HTTP client for outside services that may carry a key: the LLM and the HTTP embedders.

Rules every call follows, so no caller has to remember them:
- explicit connect/read/write timeouts, and one deadline for each request as a whole (headers and
  body), so an endpoint that answers a byte at a time cannot hold the caller past its timeout;
- a cap on the size of the answer, read as it streams in, never the whole of it first;
- bounded retries with exponential backoff and jitter, only where a retry can help (the policy
  names which statuses and whether a timeout is worth repeating);
- redirects are never followed: a redirect would carry the key to wherever the Location points
  (another host, plain HTTP), so it is reported as a failure naming the redirect target instead;
- HTTPS for every host that is not loopback, and no credentials inside the URL (they would be
  printed and logged wherever the URL is);
- proxies and .netrc from the environment are ignored, so nothing outside Tideline's own
  configuration adds or reroutes credentials;
- errors name the URL and the cause, never the key and never the response body (a misbehaving
  endpoint may echo the request's headers back).
"""

import contextlib
import ipaddress
import json
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx2
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from memory.services.errors import InvalidInput

logger = logging.getLogger("tideline.http")

RETRY_BASE_SECONDS = 0.5
RETRY_MAX_SECONDS = 8.0
CONNECT_TIMEOUT_SECONDS = 5.0
# The largest answer a caller legitimately receives: an embedder's largest batch (2048 texts) of
# 4096-dimension vectors, written as JSON floats, is about 200 MB. Callers that expect far less
# (the LLM) pass their own, smaller cap.
RESPONSE_MAX_BYTES = 256 * 1024 * 1024


class HttpFailed(Exception):
    """The service could not be reached or gave no usable answer, after the bounded retries.
    The message is safe to show: URL and cause, never a key."""


@dataclass(frozen=True)
class RetryPolicy:
    retries: int
    statuses: frozenset[int]
    on_timeout: bool


class _Retryable(HttpFailed):
    pass


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def endpoint_url_validate(url: object, *, what: str) -> str:
    """A service base URL as Tideline accepts it: http(s), a host, HTTPS unless loopback, no
    user:password part. Raises InvalidInput with a message that never repeats a credential."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput(f"{what} must be an http(s) URL such as https://api.example.com/v1")
    url = url.strip()
    try:
        parsed = urlsplit(url)
        host = parsed.hostname
        parsed.port  # noqa: B018 — a malformed port raises here
    except ValueError as exc:
        raise InvalidInput(f"{what} is not a valid URL") from exc
    if parsed.scheme not in {"http", "https"} or not host:
        raise InvalidInput(f"{what} must be an http(s) URL such as https://api.example.com/v1")
    if parsed.username is not None or parsed.password is not None:
        raise InvalidInput(
            f"{what} must not contain credentials (user:password@); the key is configured "
            "separately and never kept in the URL"
        )
    if parsed.query or parsed.fragment or url.endswith(("?", "#")):
        # Paths are appended to the base URL, so a query would swallow them, and a query often
        # carries a key (?api_key=…) that would then be logged with every request line.
        raise InvalidInput(
            f"{what} must not have a query (?…) or fragment (#…); the key is configured separately"
        )
    if parsed.scheme == "http" and not _is_loopback(host):
        raise InvalidInput(
            f"{what} must use HTTPS for a remote host; plain HTTP is allowed only for loopback"
        )
    return url.rstrip("/")


def _status_failure(response: httpx2.Response, url: str) -> HttpFailed:
    if response.is_redirect:
        location = response.headers.get("location", "")
        target = urlsplit(location)
        shown = f"{target.scheme}://{target.hostname}{target.path}" if target.hostname else "?"
        return HttpFailed(
            f"{url} answered a redirect ({response.status_code} to {shown}); redirects are not "
            "followed for requests that carry a key: configure the final URL"
        )
    return HttpFailed(f"{url} answered HTTP {response.status_code}")


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[tuple[dict, threading.Event]]:
    """httpx's timeouts bound each network operation, not the request: an endpoint that sends a
    byte within every read timeout holds the caller for as long as it likes. A timer shuts the
    request's socket down once `seconds` have passed, which ends a blocked read or write at once,
    in the headers or the body alike. Yields the request extensions that hand the socket over
    (httpcore's trace hook) and the event that tells the deadline struck."""
    sockets: list[socket.socket] = []
    expired = threading.Event()

    def cut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # already closed: nothing left to stop
            sock.shutdown(socket.SHUT_RDWR)

    def expire() -> None:
        expired.set()
        for sock in list(sockets):
            cut(sock)

    def trace(event: str, info: dict) -> None:
        # The TCP socket, then for https the TLS socket that takes its descriptor over.
        if event in {"connection.connect_tcp.complete", "connection.start_tls.complete"}:
            sock = info["return_value"].get_extra_info("socket")
            sockets.append(sock)
            if expired.is_set():  # the deadline struck while this socket was connecting
                cut(sock)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield {"trace": trace}, expired
    finally:
        timer.cancel()


def _body_read(response: httpx2.Response, *, url: str, max_bytes: int) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise HttpFailed(f"{url} answered more than {max_bytes} bytes")
    return bytes(body)


def http_post_seconds_max(*, timeout: float, policy: RetryPolicy) -> float:
    """The longest `http_post_json` can take: every attempt to its deadline, every backoff at its
    longest."""
    return (policy.retries + 1) * timeout + policy.retries * RETRY_MAX_SECONDS


def http_post_json(
    *,
    url: str,
    body: dict,
    api_key: str,
    timeout: float,
    policy: RetryPolicy,
    max_bytes: int = RESPONSE_MAX_BYTES,
) -> dict:
    """POST a JSON body and return the JSON object answered. Each attempt ends within `timeout`
    seconds, and an answer over `max_bytes` is refused. Raises HttpFailed."""
    endpoint_url_validate(url, what="the service URL")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    limits = httpx2.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_SECONDS))
    content = json.dumps(body, ensure_ascii=False).encode()

    late = f"no complete answer within {timeout:g} s"

    def timed_out(how: str) -> HttpFailed:
        failure_type = _Retryable if policy.on_timeout else HttpFailed
        return failure_type(f"{url} timed out ({how})")

    def attempt() -> dict:
        with (
            httpx2.Client(follow_redirects=False, trust_env=False, timeout=limits) as client,
            _deadline(timeout) as (extensions, expired),
        ):
            try:
                with client.stream(
                    "POST", url, content=content, headers=headers, extensions=extensions
                ) as response:
                    if response.status_code in policy.statuses:
                        raise _Retryable(f"{url} answered HTTP {response.status_code}")
                    if not response.is_success:
                        raise _status_failure(response, url)
                    raw = _body_read(response, url=url, max_bytes=max_bytes)
            except httpx2.TransportError as exc:
                # The deadline ends the request by shutting its socket: a timeout, however the
                # transport reports the cut.
                if expired.is_set():
                    raise timed_out(late) from exc
                if isinstance(exc, httpx2.TimeoutException):
                    raise timed_out(type(exc).__name__) from exc
                raise _Retryable(f"{url} could not be reached ({type(exc).__name__})") from exc
            if expired.is_set():
                # A body that ends at the connection's close reads as complete when cut short.
                raise timed_out(late)
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            # RecursionError: JSON nested deeper than the parser's stack, still just not an answer.
            raise HttpFailed(f"{url} answered something that is not JSON") from exc
        if not isinstance(payload, dict):
            raise HttpFailed(f"{url} answered JSON that is not an object")
        return payload

    def log_retry(state) -> None:
        logger.warning(
            "request to %s failed (attempt %d/%d): %s",
            url,
            state.attempt_number,
            policy.retries + 1,
            state.outcome.exception(),
        )

    retrying = Retrying(
        stop=stop_after_attempt(policy.retries + 1),
        wait=wait_exponential_jitter(
            multiplier=RETRY_BASE_SECONDS, max=RETRY_MAX_SECONDS, jitter=RETRY_BASE_SECONDS
        ),
        retry=retry_if_exception(lambda exc: isinstance(exc, _Retryable)),
        before_sleep=log_retry,
        reraise=True,
    )
    try:
        return retrying(attempt)
    except _Retryable as exc:
        raise HttpFailed(str(exc)) from exc.__cause__
