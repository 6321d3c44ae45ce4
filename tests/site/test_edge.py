"""The ASGI edge in front of every app, driven with real ASGI messages (the app behind it is a
recorder: what reached it, and with which client address)."""

import asyncio
import json

import pytest

from tideline_site import edge
from tideline_site.edge import EdgeMiddleware, RateLimiter, client_resolve


class Recorder:
    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.calls: list[dict] = []

    async def __call__(self, scope, receive, send) -> None:
        message = await receive()
        self.calls.append({"scope": scope, "body": message.get("body", b"")})
        await send({"type": "http.response.start", "status": self.status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


class KeyChecker(Recorder):
    async def __call__(self, scope, receive, send) -> None:
        self.status = 200 if (b"authorization", b"Bearer tl_good") in scope["headers"] else 401
        await super().__call__(scope, receive, send)


@pytest.fixture(autouse=True)
def fresh_limiters(settings):
    edge.LIMITERS.clear()
    edge.ACCEPTED_KEYS.clear()
    settings.TIDELINE_TRUSTED_PROXIES = []
    yield
    edge.LIMITERS.clear()
    edge.ACCEPTED_KEYS.clear()


def request(
    app,
    *,
    path: str = "/api/v1/stats",
    headers: dict | None = None,
    chunks: list[bytes] = (b"",),
    client: str = "203.0.113.7",
    stall: float = 0.0,
) -> tuple[dict, dict]:
    """Send one HTTP request through the edge; return the response and how many body chunks the
    edge pulled."""
    pulled = {"chunks": 0}
    queue = list(chunks)

    async def receive():
        if not queue:
            if stall:
                await asyncio.sleep(stall)
            return {"type": "http.disconnect"}
        pulled["chunks"] += 1
        chunk = queue.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(queue) or bool(stall)}

    sent = []

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": (client, 50000),
    }
    asyncio.run(EdgeMiddleware(app)(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    response = {
        "status": start["status"],
        "headers": {k.decode(): v.decode() for k, v in start["headers"]},
        "json": json.loads(body) if body else None,
    }
    return response, pulled


def test_it_refuses_a_chunked_body_over_the_limit_without_reading_it_whole(settings):
    settings.TIDELINE_API_MAX_BODY_BYTES = 1_000_000
    app = Recorder()
    chunk = b"x" * 65536
    chunks = [chunk] * 32  # 2 MB, no Content-Length

    response, pulled = request(app, chunks=chunks)

    assert response["status"] == 413 and "larger than" in response["json"]["detail"]
    assert pulled["chunks"] == 1_000_000 // 65536 + 1  # stopped at the first chunk past 1 MB
    assert app.calls == []


def test_it_refuses_a_declared_length_over_the_limit_before_reading(settings):
    settings.TIDELINE_API_MAX_BODY_BYTES = 1024
    response, pulled = request(Recorder(), headers={"Content-Length": "5000"}, chunks=[b"x"])
    assert response["status"] == 413 and pulled["chunks"] == 0


def test_it_hands_a_body_within_the_limit_to_the_app_in_one_piece(settings):
    app = Recorder()
    response, _ = request(app, chunks=[b'{"a":', b" 1}"])
    assert response["status"] == 200
    assert app.calls[0]["body"] == b'{"a": 1}'


def test_it_answers_408_to_a_body_that_stops_arriving(settings):
    settings.TIDELINE_BODY_TIMEOUT = 0.5
    app = Recorder()
    response, _ = request(app, headers={"Content-Length": "100"}, chunks=[b"x" * 10], stall=30)
    assert response["status"] == 408 and "did not arrive" in response["json"]["detail"]
    assert app.calls == []


def test_it_answers_429_after_the_wrong_key_limit_for_an_address(settings):
    settings.TIDELINE_THROTTLE_AUTH_FAILURES_PER_MINUTE = 20
    app = Recorder(status=401)
    statuses = [
        request(app, headers={"Authorization": f"Bearer tl_wrong_{n}"})[0]["status"]
        for n in range(1000)
    ]
    assert statuses[:20] == [401] * 20
    assert set(statuses[20:]) == {429}
    throttled, _ = request(app, headers={"Authorization": "Bearer tl_wrong_x"})
    assert int(throttled["headers"]["retry-after"]) >= 1
    assert "too many requests" in throttled["json"]["detail"]
    assert len(app.calls) == 20
    other, _ = request(app, client="198.51.100.9")
    assert other["status"] == 401  # another address is not punished


def test_it_keeps_serving_an_accepted_key_from_an_address_that_guesses(settings):
    settings.TIDELINE_THROTTLE_AUTH_FAILURES_PER_MINUTE = 5
    app = KeyChecker()
    good = {"Authorization": "Bearer tl_good"}
    assert request(app, headers=good)[0]["status"] == 200
    guesses = [request(app, headers={"Authorization": f"Bearer tl_{n}"}) for n in range(50)]
    assert [r[0]["status"] for r in guesses][-1] == 429
    assert request(app, headers=good)[0]["status"] == 200
    assert request(app)[0]["status"] == 429  # no key at all is still a guess


def test_it_limits_requests_per_key(settings):
    settings.TIDELINE_THROTTLE_KEY_PER_MINUTE = 5
    app = Recorder()
    key = {"Authorization": "Bearer tl_good"}
    statuses = [request(app, headers=key, client=f"192.0.2.{n}")[0]["status"] for n in range(8)]
    assert statuses == [200] * 5 + [429] * 3


def test_it_limits_requests_per_address(settings):
    settings.TIDELINE_THROTTLE_ADDRESS_PER_MINUTE = 3
    app = Recorder()
    statuses = [
        request(app, headers={"Authorization": f"Bearer k{n}"})[0]["status"] for n in range(5)
    ]
    assert statuses == [200] * 3 + [429] * 2


def test_it_does_not_throttle_paths_outside_the_api(settings):
    settings.TIDELINE_THROTTLE_ADDRESS_PER_MINUTE = 1
    statuses = [request(Recorder(), path="/static/x.css")[0]["status"] for _ in range(3)]
    assert statuses == [200] * 3


def test_it_ignores_x_forwarded_for_from_an_untrusted_peer(settings):
    settings.TIDELINE_THROTTLE_AUTH_FAILURES_PER_MINUTE = 3
    app = Recorder(status=401)
    statuses = [
        request(app, headers={"X-Forwarded-For": f"10.9.{n}.1", "X-Forwarded-Proto": "https"})[0][
            "status"
        ]
        for n in range(6)
    ]
    assert statuses == [401] * 3 + [429] * 3
    seen = dict(app.calls[0]["scope"]["headers"])
    assert b"x-forwarded-for" not in seen and b"x-forwarded-proto" not in seen
    assert app.calls[0]["scope"]["client"][0] == "203.0.113.7"


def test_it_believes_x_forwarded_for_only_from_a_trusted_proxy(settings):
    settings.TIDELINE_TRUSTED_PROXIES = ["10.0.0.0/8"]
    app = Recorder()
    request(app, headers={"X-Forwarded-For": "6.6.6.6, 198.51.100.4"}, client="10.1.2.3")
    assert app.calls[0]["scope"]["client"][0] == "198.51.100.4"
    assert client_resolve(peer="10.1.2.3", forwarded_for="198.51.100.4, 10.0.0.9") == "198.51.100.4"
    assert client_resolve(peer="203.0.113.1", forwarded_for="198.51.100.4") == "203.0.113.1"


def test_it_refills_a_bucket_over_its_period():
    limiter = RateLimiter(limit=2, period=0.2)
    assert limiter.take("a") == 0 and limiter.take("a") == 0
    assert 0 < limiter.take("a") <= 0.1
    asyncio.run(asyncio.sleep(0.15))
    assert limiter.take("a") == 0
