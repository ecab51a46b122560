"""Workspaces: build and validate a spec, deploy it on its cluster's backend, follow
it, delete it. The one service behind both the CLI and the app."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator


from core.domain import limits


from core.domain import metric_rows, recipe_catalog
from core.domain.custom_training import CUSTOM_MODEL, CUSTOM_SIZE, CUSTOM_TRAINING, parse_command
from core.backends import backend_for
from core.backends.base import Backend, LaunchPlan, ShellTarget, WorkerProcess, WorkspaceState
from core.state.cluster_records import get_cluster
from core.errors import FieldError, GeotrainError, InvalidInput, NotFound
from core.schema.user_files import read_user_file
from core.domain.records import Status, Workspace, WorkspaceSpec
from core.state.secret_store import TOKEN_ENV, SecretStore
from core.state.store import Store

# The YAML reader, the training schema, exports and W&B load where they are used:
# `workspaces list` and the app's first screen need none of them.
if TYPE_CHECKING:
    from core.backends.export import ExportedRun

DEFAULTS = {"model": "gpt-neo", "size": "tiny", "preset": "medium", "workers": 2, "steps": 200}


@dataclass
class DeployRequest:
    """What a user chose; None means "default, or what the --config file says"."""

    cluster: str = "local"
    model: str | None = None
    size: str | None = None
    preset: str | None = None
    workers: int | None = None
    steps: int | None = None
    image: str | None = None
    config_text: str | None = None
    config_source: str = "--config"
    sets: tuple[str, ...] = ()
    recovery: dict[str, Any] | None = None
    template: str = "distributed-training"
    command: str | None = None  # custom-training: what each worker runs (shlex words, never a shell)
    workdir: str | None = None  # custom-training: where it runs


class WorkspaceService:
    def __init__(self, store: Store | None = None, secrets: SecretStore | None = None) -> None:
        self.store = store or Store()
        self.secrets = secrets or SecretStore()

    # building a spec --------------------------------------------------------
    def build_spec(self, req: DeployRequest) -> WorkspaceSpec:
        """Defaults < --config file < flags < --set; validated in full."""
        get_cluster(self.store, req.cluster)
        base: dict[str, Any] = {}
        if req.config_text is not None:
            base = self._from_file(req.config_text, req.config_source)
        if CUSTOM_TRAINING in (req.template, base.get("template")):
            return self._build_custom(req, base)
        chosen = {k: getattr(req, k) for k in DEFAULTS if getattr(req, k) is not None}
        fields = {**DEFAULTS, **{k: v for k, v in base.items() if k in DEFAULTS}, **chosen}
        self._check_counts(fields, req.cluster)
        recipe_catalog.check_choice("model", fields["model"], list(recipe_catalog.models()), "--model")
        recipe_catalog.check_choice("preset", fields["preset"], list(recipe_catalog.presets()),
                                    "--gradient-compression")
        config = base.get("config") or recipe_catalog.default_config(fields["model"], fields["size"])
        config.update(model=fields["model"], size=fields["size"],
                      gradient_compression=fields["preset"], steps=fields["steps"])
        if any(item.partition("=")[0].strip() == "datacenters" for item in req.sets):
            config.setdefault("datacenters", 1)  # a schema key the shipped configs leave at its default
        for item in req.sets:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise InvalidInput(f"--set {item!r} is not key=value", "write e.g. --set optim.lr=3e-4")
            recipe_catalog.set_path(config, key.strip(), value.strip())
        # --set wins over the flags: the workspace's record shows what its config runs
        fields["preset"] = config.get("gradient_compression")
        if type(config.get("steps")) is int:  # anything else: the config's own check says what is wrong
            fields["steps"] = config["steps"]
            self._check_counts(fields, req.cluster)
        recipe_catalog.check_choice("preset", fields["preset"], list(recipe_catalog.presets()),
                                    "--set gradient_compression")
        spec = WorkspaceSpec.from_dict({**{k: v for k, v in base.items() if k not in DEFAULTS},
                                        **fields, "cluster": req.cluster, "config": config,
                                        **({"image": req.image} if req.image else {}),
                                        **({"recovery": req.recovery} if req.recovery else {})})
        self.validate_config(spec)
        return spec

    def _build_custom(self, req: DeployRequest, base: dict[str, Any]) -> WorkspaceSpec:
        """custom-training: the user's command in their workdir; the preset and steps are only what the
        command is told (GEOTRAIN_PRESET, GEOTRAIN_STEPS: geotrain_loop's defaults)."""
        if req.sets or (base and base.get("template") != CUSTOM_TRAINING):
            raise InvalidInput("--set and a training --config describe a catalog run, not your command",
                               "pass your settings in --command, or deploy distributed-training")
        chosen = {k: getattr(req, k) for k in ("preset", "workers", "steps") if getattr(req, k) is not None}
        fields = {k: v for k, v in {**DEFAULTS, **base, **chosen}.items() if k not in ("model", "size", "config")}
        self._check_counts(fields, req.cluster)
        recipe_catalog.check_choice("preset", fields["preset"], list(recipe_catalog.presets()),
                                    "--gradient-compression")
        given = {"command": parse_command(req.command) if req.command is not None else None,
                 "workdir": req.workdir, "image": req.image, "recovery": req.recovery}
        return WorkspaceSpec.from_dict({**fields, **{k: v for k, v in given.items() if v}, "cluster": req.cluster,
                                        "model": CUSTOM_MODEL, "size": CUSTOM_SIZE, "template": CUSTOM_TRAINING})

    def _check_counts(self, fields: dict[str, Any], cluster: str) -> None:
        """Workers and steps within what can run: a local cluster by this machine's size."""
        if isinstance(fields["steps"], int):
            limits.check_count("steps", fields["steps"], limits.MAX_STEPS)
        if isinstance(fields["workers"], int):
            local = get_cluster(self.store, cluster).kind == "local"
            highest = limits.local_worker_limit() if local else limits.MAX_WORKERS
            limits.check_count("workers", fields["workers"], highest,
                               " (what this machine can run at once: 4 per CPU, 512 MiB each)"
                               if local else "")

    def _from_file(self, text: str, source: str) -> dict[str, Any]:
        """A --config file is either a whole workspace spec or just the detailed config."""
        from core.schema.yaml_loader import load_yaml

        data = load_yaml(text, source)
        if not isinstance(data, dict):
            raise FieldError(source, "a YAML mapping", type(data).__name__)
        if "config" in data and "workers" in data or data.get("template") == CUSTOM_TRAINING:
            return dict(WorkspaceSpec.from_dict({**DEFAULTS, "cluster": "local", **data}).to_dict())
        base = {k: data[k] for k in ("model", "size", "steps") if k in data}
        if "gradient_compression" in data:
            base["preset"] = data["gradient_compression"]
        return {**base, "config": data}

    def validate_config(self, spec: WorkspaceSpec) -> None:
        from core.schema.training_config import config_errors

        if spec.template == CUSTOM_TRAINING:
            return  # the command's own settings are its own; the spec's fields were checked by from_dict
        errors = config_errors(spec.config)
        if errors:
            first = errors[0]
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise FieldError(first.path, first.expected, first.found,
                             (first.hint or "fix the value") + more)
        datacenters = spec.config.get("datacenters", 1)
        if isinstance(datacenters, int) and datacenters > 1 and spec.workers % datacenters:
            raise InvalidInput(f"{spec.workers} workers do not split evenly into {datacenters} datacenters",
                               f"use --workers a multiple of {datacenters}, or another --datacenters")

    # lifecycle --------------------------------------------------------------
    def backend(self, cluster_name: str) -> Backend:
        return backend_for(get_cluster(self.store, cluster_name))

    def new_id(self, spec: WorkspaceSpec) -> str:
        import secrets  # hashlib and hmac: loaded by a deploy, not by every start

        return f"{spec.model}-{secrets.token_hex(3)}"

    def plan(self, spec: WorkspaceSpec) -> tuple[str, LaunchPlan]:
        from core.backends import wandb_runs

        workspace_id = self.new_id(spec)
        wandb_runs.assign_project(spec.config, workspace_id)
        return workspace_id, self.backend(spec.cluster).plan(workspace_id, spec)

    def deploy(self, spec: WorkspaceSpec, tokens: dict[str, str | None],
               resume_from: ExportedRun | None = None) -> Workspace:
        """Store tokens (0600), record the workspace, start it (from an export's newest
        checkpoint when `resume_from`). Nothing stays on failure."""
        from core.backends import export, wandb_runs

        backend = self.backend(spec.cluster)
        if resume_from is not None:
            backend.check_restore()  # before any token or row is stored
        workspace_id = self.new_id(spec)
        wandb_runs.assign_project(spec.config, workspace_id)
        refs: dict[str, str] = {}
        for name, value in tokens.items():
            if value:
                refs[name] = self.secrets.put(f"{workspace_id}/{name}", value)
        spec.tokens = refs
        now = time.time()
        with self.store.write() as conn:
            conn.execute("INSERT INTO workspaces(id, cluster, spec, status, created_at, updated_at)"
                         " VALUES (?, ?, ?, ?, ?, ?)",
                         (workspace_id, spec.cluster, json.dumps(spec.to_dict()),
                          Status.PENDING.value, now, now))
        seeded: list[Path] = []
        try:
            if resume_from is not None:
                seeded = backend.restore(workspace_id, spec, resume_from) or []
            run_dir = backend.deploy(workspace_id, spec, {TOKEN_ENV[k]: r for k, r in refs.items()})
        except BaseException as original:
            try:  # the row and tokens always go; the original error is the one raised
                try:
                    if resume_from is not None:
                        try:
                            backend.delete(workspace_id)
                        finally:
                            export.remove_seeded(seeded)  # a recovery.checkpoint_dir outside the run dir
                finally:
                    self._forget(workspace_id)
            except Exception as cleanup:
                original.add_note(f"cleaning up after it also failed: {type(cleanup).__name__}: {cleanup}")
            raise
        with self.store.write() as conn:
            conn.execute("UPDATE workspaces SET run_dir=? WHERE id=?", (run_dir, workspace_id))
        self.record_event(workspace_id, "deployed", {"workers": spec.workers})
        return self.get(workspace_id)

    def _forget(self, workspace_id: str) -> None:
        with self.store.write() as conn:
            conn.execute("DELETE FROM workspaces WHERE id=?", (workspace_id,))
            conn.execute("DELETE FROM workspace_events WHERE workspace=?", (workspace_id,))
        self.secrets.delete_prefix(f"{workspace_id}/")

    def record_event(self, workspace_id: str, kind: str, detail: dict) -> None:
        with self.store.write() as conn:
            conn.execute("INSERT INTO workspace_events(workspace, at, kind, detail) VALUES (?,?,?,?)",
                         (workspace_id, time.time(), kind, json.dumps(detail)))

    def events(self, workspace_id: str) -> list[dict]:
        with self.store.read() as conn:
            rows = conn.execute("SELECT at, kind, detail FROM workspace_events WHERE workspace=?"
                                " ORDER BY at", (workspace_id,)).fetchall()
        events = [{"at": r["at"], "kind": r["kind"], **json.loads(r["detail"])} for r in rows]
        ws = self.get(workspace_id)
        try:
            events += self.backend(ws.cluster).history(workspace_id)
        except NotFound:
            pass  # the cluster record is gone; the stored events remain
        return sorted(events, key=lambda e: e["at"])

    def _row(self, row) -> Workspace:
        """A stored row; one that does not decode is named, not a traceback."""
        try:
            spec = WorkspaceSpec(**json.loads(row["spec"]))
        except (ValueError, TypeError, RecursionError):
            raise GeotrainError(f"workspace {row['id']!r} in the state database {self.store.path} is malformed",
                                "restore a backup of the database, or delete that row with sqlite3") from None
        return Workspace(id=row["id"], spec=spec,
                         status=row["status"], created_at=row["created_at"],
                         updated_at=row["updated_at"], run_dir=row["run_dir"],
                         last_loss=row["last_loss"] if metric_rows.finite(row["last_loss"]) else None)

    def get(self, workspace_id: str) -> Workspace:
        with self.store.read() as conn:
            row = conn.execute("SELECT * FROM workspaces WHERE id=?", (workspace_id,)).fetchone()
        if row is None:
            raise NotFound(f"no workspace with id {workspace_id!r}", "see `geotrain workspaces list`")
        return self._row(row)

    def list(self, refresh: bool = True) -> list[Workspace]:
        with self.store.read() as conn:
            rows = conn.execute("SELECT * FROM workspaces ORDER BY created_at").fetchall()
        workspaces = [self._row(r) for r in rows]
        if refresh:
            for ws in workspaces:
                if not Status(ws.status).terminal:
                    self.refresh(ws)
        return workspaces

    def refresh(self, ws: Workspace) -> WorkspaceState:
        """Ask the backend for the live status and remember it (and the last loss)."""
        backend = self.backend(ws.cluster)
        state = backend.status(ws.id)
        if state.status == Status.FAILED.value or not Status(state.status).terminal:
            state = self._maybe_recover(backend, ws, state)
        rows = metric_rows.usable(backend.metrics(ws.id))
        loss = next((r["loss"] for r in reversed(rows) if r.get("loss") is not None), ws.last_loss)
        if state.status != ws.status or loss != ws.last_loss:
            with self.store.write() as conn:
                conn.execute("UPDATE workspaces SET status=?, last_loss=?, updated_at=? WHERE id=?",
                             (state.status, loss, time.time(), ws.id))
            ws.status, ws.last_loss = state.status, loss
        return state

    def _maybe_recover(self, backend: Backend, ws: Workspace, state: WorkspaceState) -> WorkspaceState:
        """The recovery check the app and CLI run on every refresh, within the retry budget."""
        from core.domain.recovery import RecoverySettings  # pydantic: only for a live workspace

        budget = RecoverySettings.from_dict(ws.spec.recovery).max_recoveries
        used = sum(e["kind"] == "recovery" for e in self.events(ws.id))
        if used >= budget:
            return state
        cause = backend.recover(ws.id, ws.spec, state)
        if cause is None:
            return state
        self.record_event(ws.id, "recovery", {"scope": "workspace", "workers": [w.name for w in state.workers],
                                              "cause": cause, "attempt": used + 1, "budget": budget})
        return backend.status(ws.id)

    def status(self, workspace_id: str) -> WorkspaceState:
        return self.refresh(self.get(workspace_id))

    def logs(self, workspace_id: str, follow: bool = False) -> Iterator[tuple[str, str]]:
        ws = self.get(workspace_id)
        yield from self.backend(ws.cluster).logs(workspace_id, follow)

    def metrics(self, workspace_id: str) -> list[dict]:
        ws = self.get(workspace_id)
        return metric_rows.usable(self.backend(ws.cluster).metrics(workspace_id))

    def watcher(self, workspace_id: str) -> dict | None:
        """What the workspace's watcher in the cluster last wrote (None: no watcher)."""
        ws = self.get(workspace_id)
        return self.backend(ws.cluster).watcher(workspace_id)

    def utilization(self, workspace_id: str) -> dict[str, dict]:
        """Each worker's last CPU, network-wait and GPU figures, by worker name (empty before any)."""
        ws = self.get(workspace_id)
        return self.backend(ws.cluster).utilization(workspace_id)

    def processes(self, workspace_id: str) -> list[WorkerProcess]:
        """The workspace's worker processes (local) or pods, with state, restarts and last events."""
        ws = self.get(workspace_id)
        return self.backend(ws.cluster).processes(workspace_id)

    def shell(self, workspace_id: str, rank: int = 0) -> ShellTarget:
        """The user's $SHELL (an absolute path to an executable; else /bin/sh) in worker `rank`'s
        environment and directory, to run with its env= (never with the tokens in argv)."""
        ws = self.get(workspace_id)
        shell = os.environ.get("SHELL", "")
        if not (os.path.isabs(shell) and os.path.isfile(shell) and os.access(shell, os.X_OK)):
            shell = "/bin/sh"
        return self.backend(ws.cluster).shell(workspace_id, rank, shell)

    def utilization_history(self, workspace_id: str) -> dict[str, list[dict]]:
        """Each worker's recent figures, oldest first (the app's sparklines)."""
        ws = self.get(workspace_id)
        return self.backend(ws.cluster).utilization_history(workspace_id)

    def what_will_be_lost(self, workspace_id: str) -> str:
        from core.backends import export

        ws = self.get(workspace_id)
        where = f" in {ws.run_dir}" if ws.run_dir else ""
        try:
            held = export.inventory(self.backend(ws.cluster), ws).describe()
        except GeotrainError:
            held = "its logs, metrics and checkpoints"
        kept = self.backend(ws.cluster).kept_after_delete(ws.id, ws.spec)
        return (f"Deleting {ws.id} stops its {ws.spec.workers} workers on {ws.cluster} and removes"
                f" {held}{where}. Workspace storage is ephemeral: this cannot be undone"
                f" (export it first: `geotrain workspaces export {ws.id} DIR`)."
                + (f" Kept: {kept}." if kept else ""))

    def export(self, workspace_id: str, dest: str) -> dict:
        """Copy checkpoints, metrics, logs and the resolved config into `dest` (new or empty)."""
        from core.backends import export

        ws = self.get(workspace_id)
        return export.export_workspace(self.backend(ws.cluster), ws, Path(dest))

    def wandb_run(self, workspace_id: str) -> dict | None:
        """Where the workspace's W&B run is: URL online, run folder and sync command offline."""
        from core.backends import wandb_runs

        ws = self.get(workspace_id)
        return wandb_runs.describe(self.backend(ws.cluster).result_files(ws.id, ws.spec), ws.spec.config)

    def delete(self, workspace_id: str) -> None:
        """Forgotten only once the backend removed everything it can (a node left unreachable
        keeps the record: deleting again retries)."""
        from core.nodes import node_dirs  # the recovery settings' path check: not at start

        ws = self.get(workspace_id)
        backend = self.backend(ws.cluster)
        backend.delete(workspace_id)
        backend.remove_node_files(workspace_id, ws.spec, node_dirs.pool_remover(self.store))
        self._forget(workspace_id)


def check_token(name: str, value: str) -> None:
    """A pasted token has no spaces; one that has was pasted wrong (CLI and app alike)."""
    if not value.strip() or any(c.isspace() for c in value):
        raise InvalidInput(f"the {name} token is empty or contains whitespace",
                           "paste the token exactly as shown by the provider")


def read_config_file(path: str) -> str:
    return read_user_file(path, "--config", "pass the path of a YAML file")
