"""A local fake embedding service (both wire formats), at the process edge like the fake LLM.

Vectors are bags of hashed words, so texts sharing words are similar; `failing = True` answers 500.
"""

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIM = 64


def bag_vector(text: str) -> list[float]:
    vector = [0.0] * DIM
    for word in text.lower().split():
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return vector


class FakeEmbedder:
    def __init__(self) -> None:
        self.failing = False
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(
                    {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                )
                if fake.failing:
                    self.send_response(500)
                    self.end_headers()
                    return
                if self.path.endswith("/embeddings"):
                    payload = {
                        "data": [
                            {"index": i, "embedding": bag_vector(text)}
                            for i, text in enumerate(body["input"])
                        ]
                    }
                else:
                    payload = {"embeddings": [bag_vector(text) for text in body["texts"]]}
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
