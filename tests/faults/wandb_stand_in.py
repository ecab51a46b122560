"""WandbStandIn: a stand-in for the W&B API server (which cannot be reached here), only the
GraphQL `viewer` query a client sends to learn whose key it holds. Keys go as HTTP basic
auth with user `api`, as wandb's public API sends them; an unknown key gets 401, as
api.wandb.ai answers. Point WANDB_BASE_URL at `start()`'s URL."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class WandbStandIn:
    def __init__(self, keys: dict[str, str] | None = None) -> None:
        self.keys = dict(keys or {})  # API key -> username
        self.requests: list[str] = []  # the key each request carried
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> str:
        stand_in = self

        class Handler(_Handler):
            wandb = stand_in

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    wandb: WandbStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        auth = self.headers.get("Authorization", "")
        try:
            user, _, key = base64.b64decode(auth.removeprefix("Basic ")).decode().partition(":")
        except ValueError:
            user, key = "", ""
        self.wandb.requests.append(key)
        if self.path != "/graphql":
            return self._send(404, {"error": f"stand-in has no POST {self.path}"})
        if user != "api" or key not in self.wandb.keys:
            return self._send(401, {"errors": [{"message": "user is not logged in"}]})
        return self._send(200, {"data": {"viewer": {"id": "VXNlcjox", "username": self.wandb.keys[key]}}})
