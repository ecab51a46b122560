"""Progress lines (every rank), metrics JSONL and W&B (rank 0).

The JSONL is what the app draws live curves from: one object per logged step,
appended and flushed at once. After a restart, steps since the last checkpoint
appear again; readers keep the last line for a step.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

SECRET_ENV = ("WANDB_API_KEY", "HF_TOKEN")
# How long rank 0 waits to learn whether the W&B server (or the proxy in front of it) takes a TCP
# connection, name lookup included. wandb.init itself waits 90 s before giving up, and a worker behind a
# firewall without a route to api.wandb.ai would start every run (and every restart) 90 s late.
WANDB_PROBE_S = 5.0


def redact(text: str) -> str:
    """Remove any secret from the environment that found its way into `text`."""
    for key in SECRET_ENV:
        value = os.environ.get(key)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def say(rank: int, message: str) -> None:
    """One progress line on stdout, flushed so torchrun --tee shows it live."""
    print(redact(f"[rank {rank}] {message}"), flush=True)


def emit(kind: str, **detail) -> None:
    """A machine-readable `geotrain-event {json}` line: the local supervisor and the Kubernetes
    backend derive the workspace's state from these, the log view shows them readably
    (core.domain.run_events)."""
    print("geotrain-event " + json.dumps({"kind": kind, "at": time.time(), **detail}), flush=True)


class ProgressEvents:
    """`data` progress events for one preparation, at most one every `every_s` seconds."""

    def __init__(self, source: str, unit: str, total: int | None = None, every_s: float = 1.0,
                 **detail) -> None:
        self.source, self.unit, self.total, self.every_s, self.detail = source, unit, total, every_s, detail
        self.started = self.last = time.monotonic()
        emit("data", stage="start", source=source, unit=unit, total=total, **detail)

    def progress(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            emit("data", stage="progress", source=self.source, unit=self.unit, done=done,
                 total=self.total, **self.detail)

    def done(self, done: int | None = None, cached: bool = False) -> None:
        extra = {"done": done} if done is not None else {}
        emit("data", stage="done", source=self.source, unit=self.unit, cached=cached,
             seconds=round(time.monotonic() - self.started, 3), **extra, **self.detail)


class Telemetry:
    """Rank 0 writes metrics.jsonl and W&B; other ranks only print."""

    def __init__(self, *, rank: int, out_dir: Path, config: dict, wandb_on: bool, project: str | None,
                 entity: str | None, run_name: str) -> None:
        self.rank = rank
        self.metrics_path = out_dir / "metrics.jsonl"
        self.wandb_run = None
        if rank != 0:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        if wandb_on:
            self.wandb_run = _start_wandb(out_dir, config, project, entity, run_name)

    def log(self, record: dict) -> None:
        if self.rank != 0:
            return
        record = {**record, "time": time.time()}
        with self.metrics_path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.wandb_run is not None:
            self.wandb_run.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])

    def close(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


def _start_wandb(out_dir: Path, config: dict, project: str | None, entity: str | None, run_name: str):
    """Online with WANDB_API_KEY, offline otherwise; the run id is kept so a restart continues the run."""
    try:
        import wandb
    except ImportError:
        say(0, "wandb is not installed; logging to metrics.jsonl only")
        return None
    if not os.environ.get("WANDB_API_KEY"):
        os.environ.setdefault("WANDB_MODE", "offline")
    elif os.environ.get("WANDB_MODE", "online") == "online":
        where = probe_target(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai", urllib.request.getproxies())
        why = unreachable(*where) if isinstance(where, tuple) else where
        if why:  # offline, kept for a later upload, rather than 90 s of waiting and then no W&B at all
            say(0, f"W&B is unreachable from this worker ({why}); logging offline instead")
            os.environ["WANDB_MODE"] = "offline"
    project = project or "geotrain"  # geotrain names one per workspace; by hand, the shared one
    id_file = out_dir / "wandb_run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(8)
    id_file.write_text(run_id)
    try:
        run = wandb.init(project=project, entity=entity, name=run_name, id=run_id, resume="allow",
                         dir=str(out_dir), config=config, settings=wandb.Settings(console="off",
                                                                                   silent=True))
    except Exception as exc:  # a logging outage must not stop training
        say(0, f"wandb init failed ({type(exc).__name__}: {redact(str(exc))}); continuing without it")
        return None
    _record_run(out_dir, run, project)
    return run


def probe_target(base_url: str, proxies: dict[str, str]) -> tuple[str, int] | str:
    """(host, port) of the first hop to the W&B server at `base_url`: the server, or the proxy that
    `proxies` (urllib's getproxies(): HTTPS_PROXY and friends) names for its scheme unless NO_PROXY
    exempts it. A string: why `base_url` (or the proxy) is no address to reach."""
    url = urllib.parse.urlsplit(base_url)
    proxy = proxies.get(url.scheme)
    if proxy and url.hostname and not urllib.request.proxy_bypass(url.hostname):
        url = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    try:
        port = url.port or {"https": 443, "http": 80}.get(url.scheme)
    except ValueError as exc:
        return f"bad port in WANDB_BASE_URL or the proxy: {exc}"
    if not url.hostname or port is None:
        return "WANDB_BASE_URL (or the proxy for it) is not an http(s) URL with a host"
    return url.hostname, port


def unreachable(host: str, port: int, timeout: float = WANDB_PROBE_S) -> str | None:
    """Why no TCP connection to host:port opened within `timeout` s (name lookup included; None: it did).
    The lookup, which a socket timeout does not bound, runs in a thread that is left behind if it hangs."""
    said: dict[str, str] = {}

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            said["ok"] = ""
        except OSError as exc:
            said["error"] = f"{host}:{port}: {exc.strerror or type(exc).__name__}"

    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout)
    if "ok" in said:
        return None
    return said.get("error", f"{host}:{port}: no answer within {timeout:g}s")


def _record_run(out_dir: Path, run, project: str) -> None:
    """wandb_run.json: where the run is, for `geotrain workspaces show` and `sync`."""
    offline = os.environ.get("WANDB_MODE") == "offline"
    sync_dir = str(Path(run.settings.sync_dir).absolute())
    info = {"mode": "offline" if offline else "online", "project": project, "id": run.id,
            "url": None if offline else run.url, "sync_dir": sync_dir}
    tmp = out_dir / ".wandb_run.json.tmp"
    tmp.write_text(json.dumps(info))
    os.replace(tmp, out_dir / "wandb_run.json")
    if offline:
        say(0, f"W&B offline run in {sync_dir}; upload it later with: wandb sync {sync_dir}")
    else:
        say(0, f"W&B run: {run.url}")
