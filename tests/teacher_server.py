"""A completions server on loopback that serves a real causal LM's prompt log-probs the way vLLM's
OpenAI server does (``echo`` + ``logprobs``: the prompt's tokens, null for the first, then one
generated token): the distillation tests' teacher endpoint. It can refuse a number of requests
first (``fail_first``, HTTP 503), answer with a body that has no log-probs (``bodyless``), or decode
ids with another tokenizer's text (``decode``). Real HTTP, no mock of the client."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch


class TeacherServer:
    def __init__(self, model, tokenizer, name: str = "teacher-1", fail_first: int = 0, bodyless: bool = False,
                 decode=None):
        self.model, self.tokenizer, self.name = model.eval(), tokenizer, name
        self.fail_first, self.bodyless = fail_first, bodyless
        self.decode = decode or (lambda ids: tokenizer.decode(ids, skip_special_tokens=True))
        self.requests, self.lock = 0, threading.Lock()
        server = self

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
                self.send(200, json.dumps({"data": [{"id": server.name}]}).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests += 1
                    failing = server.requests <= server.fail_first
                if failing:
                    return self.send(503, b'{"error": {"message": "busy"}}')
                if server.bodyless:
                    return self.send(200, b'{"choices": [{"index": 0, "text": "x"}]}')
                prompts = body["prompt"] if isinstance(body["prompt"][0], list) else [body["prompt"]]
                choices = [server.choice(i, ids) for i, ids in enumerate(prompts)]
                self.send(200, json.dumps({"choices": choices}).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @torch.no_grad()
    def choice(self, index: int, ids: list[int]) -> dict:
        with self.lock:  # one forward at a time: the model is shared by the handler threads
            logits = self.model(torch.tensor([ids])).logits[0].float()
        logp = torch.log_softmax(logits, -1)
        prompt = logp[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
        generated = int(logp[-1].argmax())
        return {"index": index, "text": self.decode(ids) + self.decode([generated]),
                "logprobs": {"token_logprobs": [None, *prompt, float(logp[-1, generated])]},
                "finish_reason": "length"}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
