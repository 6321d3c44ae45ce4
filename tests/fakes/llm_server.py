"""A local fake OpenAI-compatible server: the one fake we allow, at the process edge.

Tests script its answers in order: a JSON object to return as the assistant's content, raw text
(for invalid JSON), an HTTP status (for server errors), a redirect, or a delay (for timeouts); the token
counts it reports, a raw HTTP body in place of the completion, and a body dripped byte by byte (for a
whole-request deadline). It records every request body so tests can check what was (and was not) sent.
"""

import contextlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    content: str = "{}"
    status: int = 200
    delay: float = 0.0
    headers: dict = field(default_factory=dict)
    usage: dict = field(
        default_factory=lambda: {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    )
    body: bytes | None = None  # sent as is instead of a completion around `content`
    drip: float = 0.0  # seconds between the body's bytes


def json_answer(data: dict) -> Answer:
    return Answer(content=json.dumps(data, ensure_ascii=False))


def text_answer(text: str) -> Answer:
    return Answer(content=text)


def status_answer(status: int) -> Answer:
    return Answer(status=status)


def redirect_answer(location: str, status: int = 302) -> Answer:
    return Answer(status=status, headers={"Location": location})


def slow_answer(delay: float, data: dict | None = None) -> Answer:
    return Answer(content=json.dumps(data or {}), delay=delay)


@dataclass
class FakeLLM:
    answers: deque = field(default_factory=deque)
    requests: list = field(default_factory=list)
    default: Answer = field(default_factory=Answer)
    server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *answers: Answer) -> None:
        self.answers.extend(answers)

    def start(self) -> "FakeLLM":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append(
                    {"path": self.path, "body": body, "headers": dict(self.headers)}
                )
                answer = fake.answers.popleft() if fake.answers else fake.default
                if answer.delay:
                    time.sleep(answer.delay)
                if answer.status != 200:
                    self.send_response(answer.status)
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(b'{"error": "scripted failure"}')
                    return
                payload = {
                    "id": "fake",
                    "object": "chat.completion",
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": answer.content}}
                    ],
                    "usage": answer.usage,
                }
                data = answer.body if answer.body is not None else json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                # A client that gave up (a scripted timeout) leaves nobody to answer.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    step = 1 if answer.drip else max(1, len(data))
                    for start in range(0, len(data), step):
                        self.wfile.write(data[start : start + step])
                        self.wfile.flush()
                        time.sleep(answer.drip)

            def log_message(self, *args) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
