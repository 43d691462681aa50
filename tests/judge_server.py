"""A chat-completions server on loopback that answers as a test tells it (the judge tests'): well,
slowly, with garbage, with errors. Real HTTP, no mock of the client."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeJudge:
    """A chat-completions server whose answer to a message depends on its text: ``slow`` sleeps past
    the client's timeout, ``garbage`` answers a non-JSON 200, ``error`` a 500, ``bodyless`` a JSON 200
    without choices; anything else gets ``answer(text)`` (default ``Score: 7 (text)``) after ``delay``
    seconds. Counts requests and the most in flight at once; serves the model ``judge-1``."""

    def __init__(self, delay: float = 0.0, answer=None):
        self.delay, self.requests, self.in_flight, self.most = delay, 0, 0, 0
        self.answer = answer or (lambda text: f"Score: 7 ({text})")
        self.lock = threading.Lock()
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send(self, status: int, body: bytes):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self.send(200, json.dumps({"data": [{"id": "judge-1"}]}).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text = body["messages"][-1]["content"]
                with judge.lock:
                    judge.requests += 1
                    judge.in_flight += 1
                    judge.most = max(judge.most, judge.in_flight)
                try:
                    if "slow" in text:
                        time.sleep(3.0)
                    time.sleep(judge.delay)
                    if "garbage" in text:
                        return self.send(200, b"<html>not json")
                    if "error" in text:
                        return self.send(500, b'{"error": {"message": "boom"}}')
                    if "bodyless" in text:
                        return self.send(200, b'{"usage": {}}')
                    answer = {"choices": [{"message": {"role": "assistant", "content": judge.answer(text)}}],
                              "usage": {"prompt_tokens": 5, "completion_tokens": 3}}
                    self.send(200, json.dumps(answer).encode())
                finally:
                    with judge.lock:
                        judge.in_flight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
