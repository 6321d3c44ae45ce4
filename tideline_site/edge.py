"""The edge: what every HTTP request meets before Tideline reads it.

`EdgeMiddleware` wraps an ASGI app (the Django site in tideline_site/asgi.py, the MCP app in
`manage.py mcp --http`):

- **Who is calling**: the peer address, or — only when the peer is one of
  TIDELINE_TRUSTED_PROXIES — the client the proxy names in X-Forwarded-For. From any other peer the
  X-Forwarded-* headers are dropped, so nobody chooses the address they are throttled under or
  claims HTTPS they do not have.
- **Throttling** (paths under /api/ and /mcp): requests per API key and per address, and answers
  of 401 per address (1,000 guessed keys meet a 429 after the first few), each a token bucket
  refilled over a minute. Over a limit: 429, `Retry-After`, JSON `{"detail": …}`.
- **Bounded heads**: a request head (request line and headers) over HEAD_MAX_BYTES gets 431. One
  still arriving is bounded, and timed, by the HTTP protocol (tideline_site/http_protocol.py); this
  refuses one that arrived whole in a single read, which h11 accepts at any size.
- **Bounded bodies**: a body over TIDELINE_API_MAX_BODY_BYTES is refused with 413 as soon as its
  declared length or the bytes received so far pass the limit — a chunked body is never read
  whole — and a body not complete within TIDELINE_BODY_TIMEOUT seconds (short or slow) gets 408,
  so no connection is held open waiting for bytes that never come.

Owner-panel logins are throttled by `LoginThrottleMiddleware` (a Django middleware, because the
user name is in the parsed form) together with Django's `user_login_failed` signal.

Counters live in this process: Tideline serves from one process (`./tideline up`); with several
workers each has its own, so the effective limit is the setting times the workers.
"""

import asyncio
import hashlib
import ipaddress
import json
import math
import threading
import time
from collections import OrderedDict
from functools import cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import JsonResponse

THROTTLED_PREFIXES = ("/api/", "/mcp")
FORWARDING_HEADERS = frozenset(
    {b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host", b"x-real-ip", b"forwarded"}
)
TRACKED_IDENTITIES = 100_000
# nginx's default for a whole head is 8 KB per line and 32 KB in all; a bearer key, a session id
# and a browser's cookies fit in 16 KB many times over.
HEAD_MAX_BYTES = 16 * 1024
MINUTE = 60.0


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    pass


class RateLimiter:
    """A token bucket per identity: `limit` requests, refilled evenly over `period` seconds.
    Bounded memory: the least recently seen identities are forgotten first."""

    def __init__(self, *, limit: int, period: float) -> None:
        self.limit = limit
        self.period = period
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _level(self, identity: str, now: float) -> float:
        tokens, at = self._buckets.get(identity, (float(self.limit), now))
        return min(float(self.limit), tokens + (now - at) * self.limit / self.period)

    def _store(self, identity: str, tokens: float, now: float) -> None:
        self._buckets[identity] = (tokens, now)
        self._buckets.move_to_end(identity)
        while len(self._buckets) > TRACKED_IDENTITIES:
            self._buckets.popitem(last=False)

    def wait(self, identity: str) -> float:
        """Seconds until this identity may act again; 0 when it may act now."""
        with self._lock:
            tokens = self._level(identity, time.monotonic())
        return 0.0 if tokens >= 1 else (1 - tokens) * self.period / self.limit

    def take(self, identity: str) -> float:
        """Spend one token when there is one; returns the wait like `wait` (0 = spent)."""
        now = time.monotonic()
        with self._lock:
            tokens = self._level(identity, now)
            if tokens < 1:
                return (1 - tokens) * self.period / self.limit
            self._store(identity, tokens - 1, now)
        return 0.0


class AcceptedKeys:
    """Digests of keys the app accepted (any answer but 401) — bounded, most recent kept."""

    def __init__(self) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, key: str) -> None:
        with self._lock:
            self._keys[key] = None
            self._keys.move_to_end(key)
            while len(self._keys) > TRACKED_IDENTITIES:
                self._keys.popitem(last=False)

    def seen(self, key: str) -> bool:
        return bool(key) and key in self._keys

    def clear(self) -> None:
        with self._lock:
            self._keys.clear()


LIMITERS: dict[tuple[str, int, float], RateLimiter] = {}
ACCEPTED_KEYS = AcceptedKeys()


def limiter_get(name: str, *, limit: int, period: float = MINUTE) -> RateLimiter | None:
    """The process's limiter for this name and setting; None when the limit is switched off (0)."""
    if limit <= 0:
        return None
    return LIMITERS.setdefault((name, limit, period), RateLimiter(limit=limit, period=period))


@cache
def _proxy_networks(entries: tuple[str, ...]) -> tuple:
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"TIDELINE_TRUSTED_PROXIES: {entry!r} is not an IP address or network"
            ) from exc
    return tuple(networks)


def trusted_proxies() -> tuple:
    return _proxy_networks(tuple(settings.TIDELINE_TRUSTED_PROXIES))


def _is_trusted(address: str, networks: tuple) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


def client_resolve(*, peer: str, forwarded_for: str) -> str:
    """The address a request is accounted to: the peer itself, unless the peer is a trusted proxy;
    then the nearest address in X-Forwarded-For that is not a trusted proxy (the ones further left
    were written by the client and prove nothing)."""
    networks = trusted_proxies()
    if not networks or not _is_trusted(peer, networks):
        return peer
    hops = [hop.strip() for hop in forwarded_for.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _is_trusted(hop, networks):
            return hop
    return hops[0] if hops else peer


def _key_identity(headers: dict[bytes, bytes]) -> str:
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return ""
    # Never keep the key itself in memory longer than the request: a digest tells keys apart.
    return hashlib.sha256(token.strip().encode()).hexdigest()[:32]


def _retry_after(wait: float) -> int:
    return max(1, math.ceil(wait))


async def _answer(send, status: int, detail: str, extra: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        # The rest of the request was not read: the connection cannot carry another one.
        (b"connection", b"close"),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _head_size(scope) -> int:
    line = sum(len(scope.get(part) or b"") for part in ("method", "raw_path", "query_string"))
    # Each header costs its name, its value, ": " and the line end.
    return line + sum(len(name) + len(value) + 4 for name, value in scope.get("headers") or [])


class EdgeMiddleware:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _head_size(scope) > HEAD_MAX_BYTES:
            await _answer(send, 431, f"the request head is larger than {HEAD_MAX_BYTES} bytes")
            return
        scope, headers = self._resolve_client(scope)
        address = scope["client"][0] if scope.get("client") else ""
        throttled = scope["path"].startswith(THROTTLED_PREFIXES)
        key = _key_identity(headers)
        if throttled:
            wait = self._throttle_wait(address, key)
            if wait:
                await _answer(
                    send,
                    429,
                    f"too many requests; retry in {_retry_after(wait)} s",
                    [(b"retry-after", str(_retry_after(wait)).encode())],
                )
                return
        limit = settings.TIDELINE_API_MAX_BODY_BYTES
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _answer(send, 413, f"request body is larger than {limit} bytes")
            return
        try:
            async with asyncio.timeout(settings.TIDELINE_BODY_TIMEOUT):
                body = await self._read_body(receive, limit)
        except TimeoutError:
            await _answer(
                send,
                408,
                f"the request body did not arrive within {settings.TIDELINE_BODY_TIMEOUT:g} s",
            )
            return
        except BodyTooLarge:
            await _answer(send, 413, f"request body is larger than {limit} bytes")
            return
        except ClientGone:
            return
        await self.app(
            scope, self._replay(body, receive), self._watch(send, address, key, throttled)
        )

    @staticmethod
    def _resolve_client(scope) -> tuple[dict, dict[bytes, bytes]]:
        raw_headers = list(scope.get("headers") or [])
        headers = dict(raw_headers)
        peer = scope["client"][0] if scope.get("client") else ""
        networks = trusted_proxies()
        if networks and _is_trusted(peer, networks):
            forwarded = headers.get(b"x-forwarded-for", b"").decode("latin-1")
            address = client_resolve(peer=peer, forwarded_for=forwarded)
            return {**scope, "client": (address, 0)}, headers
        kept = [(name, value) for name, value in raw_headers if name not in FORWARDING_HEADERS]
        return {**scope, "headers": kept}, dict(kept)

    @staticmethod
    def _throttle_wait(address: str, key: str) -> float:
        failures = limiter_get(
            "auth-failures", limit=settings.TIDELINE_THROTTLE_AUTH_FAILURES_PER_MINUTE
        )
        per_address = limiter_get("address", limit=settings.TIDELINE_THROTTLE_ADDRESS_PER_MINUTE)
        per_key = limiter_get("key", limit=settings.TIDELINE_THROTTLE_KEY_PER_MINUTE)
        # An address that guessed too many keys is refused, except with a key that has already
        # been accepted: a guesser on the same machine cannot lock the owner's own agents out.
        wait = failures.wait(address) if failures and not ACCEPTED_KEYS.seen(key) else 0.0
        if not wait and per_address:
            wait = per_address.take(address)
        if not wait and key and per_key:
            wait = per_key.take(key)
        return wait

    @staticmethod
    async def _read_body(receive, limit: int) -> bytes:
        """The whole body, refused (BodyTooLarge) as soon as it passes the limit: nothing more is
        read after that."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    def _replay(body: bytes, receive):
        delivered = False

        async def replay():
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        return replay

    @staticmethod
    def _watch(send, address: str, key: str, throttled: bool):
        failures = limiter_get(
            "auth-failures", limit=settings.TIDELINE_THROTTLE_AUTH_FAILURES_PER_MINUTE
        )
        if not throttled or failures is None:
            return send

        async def watched(message):
            if message["type"] == "http.response.start":
                if message["status"] == 401:
                    failures.take(address)
                elif key and message["status"] != 429:
                    ACCEPTED_KEYS.add(key)
            await send(message)

        return watched


def edge_wrap(app):
    return EdgeMiddleware(app)


def _login_limiter():
    return limiter_get(
        "login-failures",
        limit=settings.TIDELINE_LOGIN_FAILURES,
        period=float(settings.TIDELINE_LOGIN_WINDOW_SECONDS),
    )


def _login_identities(request) -> list[str]:
    address = request.META.get("REMOTE_ADDR", "")
    username = str(request.POST.get("username", ""))[:150].lower()
    return [f"address:{address}"] + ([f"user:{username}"] if username else [])


def login_failure_record(sender, credentials, request=None, **kwargs) -> None:
    """`user_login_failed` receiver: one failure for the address and for the user name tried."""
    if request is None:
        return
    limiter = _login_limiter()
    for identity in _login_identities(request):
        limiter.take(identity)


class LoginThrottleMiddleware:
    """Refuses an owner-panel login POST with 429 while its address or user name has used up its
    failed attempts (TIDELINE_LOGIN_FAILURES per TIDELINE_LOGIN_WINDOW_SECONDS)."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        from django.urls import reverse

        if request.method == "POST" and request.path == reverse("admin:login"):
            limiter = _login_limiter()
            wait = max(limiter.wait(identity) for identity in _login_identities(request))
            if wait:
                response = JsonResponse(
                    {"detail": f"too many failed logins; retry in {_retry_after(wait)} s"},
                    status=429,
                )
                response["Retry-After"] = str(_retry_after(wait))
                return response
        return self.get_response(request)
