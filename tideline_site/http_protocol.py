"""The HTTP protocol `./tideline up` and `manage.py mcp --http` serve with: uvicorn's h11 protocol,
plus what it lacks where it faces a network.

- **A deadline for the request head.** uvicorn times a connection only between requests
  (--timeout-keep-alive) and the edge times only the body, so a connection that sent nothing, or
  half a head, held its slot for ever: a few hundred of them filled --limit-concurrency and every
  other client was answered 503 until they left. A head must now be complete within
  TIDELINE_HEAD_TIMEOUT seconds of the connection opening (or, on a kept-alive connection, of its
  first byte); a byte at a time does not extend it. Past it the connection ends, with a 408 when
  part of a head had arrived.
- **Busy, in JSON.** Past --limit-concurrency connections or requests the answer is a JSON 503
  with Retry-After, instead of uvicorn's plain text that agents' clients cannot read.
- **A bounded head, refused in JSON.** h11 buffers at most HEAD_MAX_BYTES of a head still
  incomplete; one past that gets 431, a malformed one 400, both JSON like every other refusal
  (uvicorn answers plain text). A complete head too large is the edge's 431 (tideline_site/edge.py).

Selected by its import path: `--http tideline_site.http_protocol:EdgeH11Protocol`. uvicorn
imports it before the app, so Django's settings are read per connection, never at import.
"""

import asyncio
import json

import h11
from django.conf import settings
from uvicorn.protocols.http.h11_impl import H11Protocol

from tideline_site.edge import HEAD_MAX_BYTES

# Seconds a refused connection is still drained before it closes (see _refuse).
LINGER_S = 2.0


def _refusal(status: int, reason: bytes, detail: str) -> bytes:
    """A whole JSON answer that closes the connection, written as bytes: when the head never
    completed h11 has no request to answer and will not build a response."""
    body = json.dumps({"detail": detail}).encode()
    head = (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n" % (status, reason, len(body))
    )
    return head + body


async def _busy(scope, receive, send) -> None:
    body = json.dumps({"detail": "the server is at its connection limit; retry shortly"}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class EdgeH11Protocol(H11Protocol):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The head bound is ours, not a command-line flag each launcher must remember.
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_MAX_BYTES)
        self.head_deadline: asyncio.TimerHandle | None = None
        self.refused = False
        # uvicorn answers past the limit with its own plain text; `app` below answers instead.
        self.slots, self.limit_concurrency = self.limit_concurrency, None

    @property
    def app(self):
        """The app uvicorn runs for the request whose head just arrived: ours when it is over the
        limit, counted as uvicorn counts it."""
        if self.slots is not None and max(len(self.connections), len(self.tasks)) >= self.slots:
            return _busy
        return self._app

    @app.setter
    def app(self, value) -> None:
        self._app = value

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_deadline_arm()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        super().data_received(data)
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._head_deadline_arm()
        else:
            self._head_deadline_cancel()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_deadline_cancel()
        super().connection_lost(exc)

    def _head_deadline_arm(self) -> None:
        # Armed once per head: later bytes of the same head do not move it.
        if self.head_deadline is None:
            self.head_deadline = self.loop.call_later(
                settings.TIDELINE_HEAD_TIMEOUT, self._head_timed_out
            )

    def _head_deadline_cancel(self) -> None:
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def _head_timed_out(self) -> None:
        self.head_deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        buffered, _ = self.conn.trailing_data
        if not buffered:
            self.transport.close()
            return
        self._refuse(
            _refusal(
                408,
                b"Request Timeout",
                f"the request head did not arrive within {settings.TIDELINE_HEAD_TIMEOUT:g} s",
            )
        )

    def send_400_response(self, msg: str) -> None:
        buffered, _ = self.conn.trailing_data
        if len(buffered) > HEAD_MAX_BYTES:
            answer = _refusal(
                431,
                b"Request Header Fields Too Large",
                f"the request head is larger than {HEAD_MAX_BYTES} bytes",
            )
        else:
            answer = _refusal(400, b"Bad Request", "the request is not valid HTTP/1.1")
        self._refuse(answer)

    def _refuse(self, answer: bytes) -> None:
        """Answer, then read no more of the request but drain what the client still sends for a
        moment: closed with unread bytes, the connection is reset and a client still uploading
        loses the answer (nginx's lingering close)."""
        self._head_deadline_cancel()
        self.refused = True
        self.transport.write(answer)
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()
