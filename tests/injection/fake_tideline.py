"""A local fake Tideline HTTP server, at the process edge, for what a real one will not do: answer
a byte at a time, redirect, answer odd bodies. Tests script raw answers in order (then the
default) and read back every request it received, headers and body as sent."""

import contextlib
import json
import socket
import socketserver
import threading
import time
from collections import deque
from dataclasses import dataclass, field


@dataclass
class Answer:
    body: bytes = b"{}"
    status: int = 200
    headers: dict = field(default_factory=dict)
    drip: float = 0.0  # seconds between the body's bytes, after the headers went out at once


def json_answer(data, status: int = 200) -> Answer:
    return Answer(body=json.dumps(data).encode(), status=status)


@dataclass
class FakeTideline:
    answers: deque = field(default_factory=deque)
    requests: list = field(default_factory=list)
    default: Answer = field(default_factory=lambda: json_answer({"block": ""}))
    host: str = "127.0.0.1"
    server: socketserver.ThreadingTCPServer | None = None

    @property
    def url(self) -> str:
        port = self.server.server_address[1]
        return f"http://[{self.host}]:{port}" if ":" in self.host else f"http://{self.host}:{port}"

    def script(self, *answers: Answer) -> None:
        self.answers.extend(answers)

    def bodies(self) -> list:
        return [json.loads(request["body"]) for request in self.requests]

    def start(self) -> "FakeTideline":
        fake = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                request_line = self.rfile.readline().decode("latin-1").strip()
                headers = {}
                while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = self.rfile.read(int(headers.get("content-length") or 0))
                method, _, rest = request_line.partition(" ")
                fake.requests.append(
                    {
                        "method": method,
                        "path": rest.rsplit(" ", 1)[0],
                        "headers": headers,
                        "body": body,
                    }
                )
                answer = fake.answers.popleft() if fake.answers else fake.default
                head = [
                    f"HTTP/1.1 {answer.status} X",
                    f"Content-Length: {len(answer.body)}",
                    "Content-Type: application/json",
                    "Connection: close",
                ]
                head += [f"{name}: {value}" for name, value in answer.headers.items()]
                # A client that gave up leaves nobody to answer.
                with contextlib.suppress(OSError):
                    self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode())
                    self.wfile.flush()
                    step = 1 if answer.drip else max(1, len(answer.body))
                    for start in range(0, len(answer.body), step):
                        self.wfile.write(answer.body[start : start + step])
                        self.wfile.flush()
                        time.sleep(answer.drip)

        class Server(socketserver.ThreadingTCPServer):
            address_family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server((self.host, 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
