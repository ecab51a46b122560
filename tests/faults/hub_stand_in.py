"""HubStandIn: a stand-in for the Hugging Face Hub (which cannot be reached here), just
the endpoints `huggingface_hub.HfApi` uses to create a repo, commit files, list them and
download them, and to ask about a gated dataset (`auth_check`, `dataset_info`). Files
live in memory; every request is recorded for the tests to check.

Gated datasets answer as the Hub does: no token -> 401 GatedRepo, a token the Hub does
not know -> 401 "Invalid credentials in Authorization header", a known token whose
account has not accepted the terms -> 403 GatedRepo, a granted one -> 200."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


class HubStandIn:
    def __init__(self) -> None:
        self.repos: dict[str, dict[str, bytes]] = {}
        self.commits: list[tuple[str, list[str]]] = []  # (repo, paths) in commit order
        self.requests: list[tuple[str, str, str]] = []  # (method, path, Authorization)
        self.tokens: set[str] = set()  # tokens the Hub knows (for gated datasets)
        self.gated: dict[str, set[str]] = {}  # gated dataset -> tokens whose account was granted
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> str:
        hub = self

        class Handler(_Handler):
            stand_in = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()


def _sha(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    stand_in: HubStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: bytes | dict, headers: dict | None = None, head: bool = False) -> None:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _base(self) -> str:
        return f"http://{self.headers['Host']}"

    def _route(self, method: str) -> None:
        url = urlparse(self.path)
        path = unquote(url.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        hub = self.stand_in
        hub.requests.append((method, path, self.headers.get("Authorization", "")))
        repos = hub.repos
        if m := re.fullmatch(r"/api/datasets/(.+?/[^/]+?)(/auth-check)?", path):
            return self._gated(m.group(1), self.headers.get("Authorization", ""))
        if method == "POST" and path == "/api/repos/create":
            spec = json.loads(body)
            repo = f"{spec.get('organization') or 'me'}/{spec['name']}" if "/" not in spec["name"] else spec["name"]
            if repo in repos:
                return self._send(409, {"error": "You already created this model repo",  # and its url, as the Hub
                                        "url": f"{self._base()}/{repo}"})  # does (exist_ok reads it)
            repos[repo] = {}
            return self._send(200, {"url": f"{self._base()}/{repo}", "name": repo})
        if m := re.fullmatch(r"/api/models/(.+?/.+?)/preupload/(.+)", path):
            files = json.loads(body)["files"]
            return self._send(200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                               "shouldIgnore": False} for f in files]})
        if m := re.fullmatch(r"/api/models/(.+?/.+?)/commit/(.+)", path):
            repo, added = m.group(1), []
            for line in body.decode().splitlines():
                item = json.loads(line)
                if item["key"] == "file":
                    repos.setdefault(repo, {})[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                    added.append(item["value"]["path"])
            hub.commits.append((repo, added))
            oid = _sha(json.dumps(added).encode())
            return self._send(200, {"commitUrl": f"{self._base()}/{repo}/commit/{oid}", "commitOid": oid})
        if m := re.fullmatch(r"/api/models/(.+?/.+?)/tree/([^/]+)(/.*)?", path):
            files = repos.get(m.group(1))
            if files is None:
                return self._send(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            listing = [{"type": "file", "path": p, "size": len(d), "oid": _sha(d)}
                       for p, d in sorted(files.items())]
            return self._send(200, json.dumps(listing).encode())
        if m := re.fullmatch(r"/(.+?/.+?)/resolve/([^/]+)/(.+)", path):
            data = repos.get(m.group(1), {}).get(m.group(3))
            if data is None:
                return self._send(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"},
                                  head=method == "HEAD")
            headers = {"X-Repo-Commit": "0" * 40, "ETag": f'"{_sha(data)}"'}
            return self._send(200, data, headers, head=method == "HEAD")
        self._send(404, {"error": f"stand-in has no {method} {path}"})

    def _gated(self, repo: str, authorization: str) -> None:
        hub = self.stand_in
        if repo not in hub.gated:
            return self._send(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        token = authorization.removeprefix("Bearer ").strip()
        if not token:
            return self._send(401, {"error": f"Access to dataset {repo} is restricted. You must be authenticated"
                                             " to access it."}, {"X-Error-Code": "GatedRepo"})
        if token not in hub.tokens:
            return self._send(401, {"error": "Invalid credentials in Authorization header"})
        if token not in hub.gated[repo]:
            return self._send(403, {"error": f"Access to dataset {repo} is restricted and you are not in the"
                                             " authorized list."}, {"X-Error-Code": "GatedRepo"})
        return self._send(200, {"id": repo, "gated": "manual", "private": False})

    def do_GET(self) -> None:
        self._route("GET")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_POST(self) -> None:
        self._route("POST")
