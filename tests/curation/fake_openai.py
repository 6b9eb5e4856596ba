"""A fake OpenAI-compatible Chat Completions server on loopback: a real HTTP server whose answers a test scripts.

``script(body, n)`` gets the request body and the number of requests seen before it and returns a
:class:`Reply` (status, body, headers, delay) or a response body (status 200). Every request is kept in
``requests`` (path, headers, body) so a test can check what the client sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    body: dict[str, Any]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def completion(content: str | None = None, tool_calls: list[tuple[str, dict[str, Any]]] | None = None,
               prompt_tokens: int = 100, completion_tokens: int = 20, cached_tokens: int = 0, model: str = "gpt-5-mini",
               fingerprint: str | None = "fp_test", call_prefix: str = "call") -> dict[str, Any]:
    """A Chat Completions response body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [{"id": f"{call_prefix}_{i}", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}
                                 for i, (name, args) in enumerate(tool_calls)]
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": model,
            "system_fingerprint": fingerprint,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": cached_tokens}}}


def error_body(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None}}


class FakeOpenAI:
    def __init__(self, script: Callable[[dict[str, Any], int], Reply | dict[str, Any]]):
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                with fake._lock:
                    n = len(fake.requests)
                    fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                reply = fake.script(body, n)
                if not isinstance(reply, Reply):
                    reply = Reply(reply)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                data = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
