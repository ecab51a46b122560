"""`geotrain workspaces deploy|schema|list|show|logs|delete`."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from core.cli.output import dump_json, table
from core.errors import InvalidInput
from core.domain import describe, recipe_catalog
from core.domain.records import TEMPLATES, WorkspaceSpec
from core.domain.run_events import describe_record
from core.domain.terminal_text import printable
from core.workspaces import DeployRequest, WorkspaceService, check_token, read_config_file


def register(groups) -> None:
    sub = groups["workspaces"]
    p = sub.add_parser("deploy", help="deploy a workspace (default: 2-worker tiny gpt-neo on local)")
    p.add_argument("template", choices=TEMPLATES)
    p.add_argument("--cluster", default="local", complete="cluster")
    p.add_argument("--model", complete="model", help=f"one of: {', '.join(recipe_catalog.models())}")
    p.add_argument("--size", complete="size", help="tiny, or a real size of the model: " + "; ".join(
        f"{model} {', '.join(sizes)}" for model, sizes in recipe_catalog.models().items()))
    p.add_argument("--gradient-compression", dest="preset", metavar="PRESET", complete="preset",
                   help=lambda: f"one of: {', '.join(recipe_catalog.presets())}")  # read when shown
    p.add_argument("--workers", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--datacenters", type=int, metavar="K",
                   help="split the workers evenly into K datacenters: hierarchical DiLoCo (same as --set datacenters=K)")
    p.add_argument("--image", help="container image (Kubernetes clusters)")
    p.add_argument("--command", help="custom-training: what each worker runs, e.g. \"python train.py\" "
                   "(split into words, never run by a shell; RANK, WORLD_SIZE and GEOTRAIN_OUT_DIR in its environment)")
    p.add_argument("--workdir", metavar="DIR", help="custom-training: the directory the command runs in "
                   "(on Kubernetes shipped to the pods: source files only, at most 4 MiB)")
    p.add_argument("--registry-user", metavar="USER", help="user at a private --image registry; the password "
                   "from GEOTRAIN_REGISTRY_PASSWORD or a hidden prompt (never argv); pods pull with a pull Secret")
    p.add_argument("--wandb-token", help="W&B API key; offline without. On the command line every local user "
                   "sees it in `ps`: prefer WANDB_API_KEY or --ask-tokens")
    p.add_argument("--hf-token", help="Hugging Face token. On the command line every local user sees it in "
                   "`ps`: prefer HF_TOKEN or --ask-tokens")
    p.add_argument("--ask-tokens", action="store_true", help="prompt for tokens, hidden (never in argv)")
    p.add_argument("--config", metavar="FILE", help="a workspace spec or detailed config (YAML)")
    p.add_argument("--edit", action="store_true", help="edit the full spec in $EDITOR first")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a detailed-config key, e.g. optim.lr=3e-4 (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="print what would run; change nothing")
    p.add_argument("--force", action="store_true",
                   help="deploy even when requirements (disk, memory, dataset access, W&B key) are not met")
    p.add_argument("--json", action="store_true", help="print the new workspace as JSON")
    p.add_argument("--resume-from", metavar="DIR", help="start from the newest checkpoint of an export")
    p.add_argument("--yes", "-y", action="store_true",
                   help="ask nothing on a terminal (no editor question, no token prompts)")
    p.set_defaults(handler=cmd_deploy)

    p = sub.add_parser("schema", help="print the JSON Schema of a detailed config (for editors)")
    p.add_argument("--spec", action="store_true", help="of a whole workspace spec file instead")
    p.add_argument("--output", "-o", metavar="FILE", help="write it to FILE")
    p.set_defaults(handler=cmd_schema)

    p = sub.add_parser("list", help="list workspaces on all clusters")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_list)
    p = sub.add_parser("show", help="status, workers, spec and history of a workspace")
    p.add_argument("id", complete="workspace")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_show)
    p = sub.add_parser("logs", help="print a workspace's logs, labelled by worker")
    p.add_argument("id", complete="workspace")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until it ends")
    p.add_argument("--raw", action="store_true",
                   help="print geotrain's event lines as the workers wrote them (JSON)")
    p.add_argument("--no-events", action="store_true", help="leave geotrain's event lines out")
    p.set_defaults(handler=cmd_logs)
    p = sub.add_parser("delete", help="stop a workspace and remove its files")
    p.add_argument("id", complete="workspace")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler=cmd_delete)


def _tokens(args) -> dict[str, str | None]:
    from core.cli import deploy_prompts

    tokens = {"wandb": args.wandb_token or os.environ.get("WANDB_API_KEY"),
              "hf": args.hf_token or os.environ.get("HF_TOKEN")}
    tokens = deploy_prompts.ask_missing_tokens(args, tokens)
    for name, value in tokens.items():
        if value is not None:
            check_token(name, value)
    return tokens


def _deploy_notes(service, spec) -> list[str]:
    """What the user must know before a Kubernetes workspace runs (one line each)."""
    from core.kubernetes.recovery_manifests import resume_caveat
    from core.state.cluster_records import get_cluster

    if get_cluster(service.store, spec.cluster).kind == "local":
        return []
    return [line for line in (resume_caveat(spec),) if line]


def editor_schema(spec_file: bool) -> dict:
    """JSON Schema of a detailed config, or of a whole spec file with that config inside."""
    from core.schema.training_config import config_json_schema

    config = config_json_schema()
    return WorkspaceSpec.editor_schema(config) if spec_file else config


def _edit(text: str) -> str:
    """Open `text` in $EDITOR; its first line points yaml-language-server (VS Code's YAML
    extension and others) at a JSON Schema written beside it, so mistakes show as you type."""
    import shlex
    import shutil
    import subprocess
    import tempfile

    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    folder = Path(tempfile.mkdtemp(prefix="geotrain-edit-"))  # 0700, private to this user
    schema, name = folder / "spec.schema.json", folder / "spec.yaml"
    try:
        schema.write_text(json.dumps(editor_schema(spec_file=True), indent=1))
        name.write_text(f"# yaml-language-server: $schema={schema.as_uri()}\n{text}")
        if subprocess.call(shlex.split(editor) + [str(name)]) != 0:
            raise InvalidInput(f"the editor {editor!r} exited with an error", "nothing was deployed")
        from core.schema.user_files import read_user_file

        return read_user_file(name, "the edited spec", "nothing was deployed; edit it again")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def cmd_schema(args) -> int:
    """Print (or write) the JSON Schema editors validate configs against."""
    text = json.dumps(editor_schema(args.spec), indent=1)
    if args.output:
        Path(args.output).expanduser().write_text(text + "\n")
        print(f"Wrote {args.output}; point your editor at it with a first line "
              f"`# yaml-language-server: $schema={Path(args.output).expanduser().resolve().as_uri()}`.")
    else:
        print(text)
    return 0


def cmd_deploy(args) -> int:
    from core.backends.export import read_export  # each handler loads what it alone needs
    from core.cli import deploy_prompts
    from core.cli.requirements_table import requirements_met

    service = WorkspaceService()
    req = DeployRequest(cluster=args.cluster, model=args.model, size=args.size, preset=args.preset,
                        workers=args.workers, steps=args.steps, image=args.image, template=args.template,
                        command=args.command, workdir=args.workdir,
                        sets=tuple(args.sets) + ((f"datacenters={args.datacenters}",) if args.datacenters is not None else ()))
    if args.config:
        req.config_text = read_config_file(args.config)
        req.config_source = args.config
    resume = read_export(args.resume_from) if args.resume_from else None
    if resume is not None and not args.config:  # the exported spec, unless another is given
        req.config_text, req.config_source = resume.spec_text, f"{args.resume_from}/spec.yaml"
    spec = service.build_spec(req)
    if deploy_prompts.wants_editor(args):
        edited = _edit(spec.to_yaml())
        spec = service.build_spec(DeployRequest(cluster=args.cluster, config_text=edited,
                                                config_source="the edited spec"))
    tokens = _tokens(args)
    notes = _deploy_notes(service, spec)
    if args.registry_user:
        from core.state.cluster_records import get_cluster

        tokens.update(deploy_prompts.registry_token(args, spec.image, get_cluster(service.store, spec.cluster).kind))
    if args.dry_run:
        spec.tokens = {name: "(given)" for name, value in tokens.items() if value}
        workspace_id, plan = service.plan(spec)
        print(plan.description.rstrip())
        for name, value in tokens.items():
            print(f"# {name} token: {'set (passed through the environment, not shown)' if value else 'not set'}")
        for note in notes:
            print(f"# note: {note}")
        print("# resolved config:")
        print(plan.config_yaml.rstrip())
        return 0
    if not requirements_met(service.store, spec, tokens, args.force):
        return 1
    ws = service.deploy(spec, tokens, resume_from=resume)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        dump_json({"id": ws.id, "cluster": ws.cluster, "status": ws.status, "run_dir": ws.run_dir})
    else:
        print(f"Deployed {ws.id} on {ws.cluster}: {spec.workers}× {spec.model}/{spec.size}, "
              f"preset {spec.preset}, {spec.steps} steps.")
        if resume is not None:
            print(f"It continues from the exported checkpoint at step {resume.step}.")
        print(f"Follow it with `geotrain workspaces logs {ws.id} --follow`.")
    return 0


def cmd_list(args) -> int:
    workspaces = WorkspaceService().list()
    if args.json:
        dump_json([{"id": w.id, "cluster": w.cluster, "model": w.spec.model, "size": w.spec.size,
                    "preset": w.spec.preset, "workers": w.spec.workers, "status": w.status,
                    "created_at": w.created_at, "last_loss": w.last_loss} for w in workspaces])
        return 0
    if not workspaces:
        print("No workspaces. Try `geotrain workspaces deploy distributed-training --cluster local`.")
        return 0
    now = time.time()
    table(["id", "cluster", "model", "preset", "workers", "status", "age", "last loss"],
          [[w.id, w.cluster, f"{w.spec.model}/{w.spec.size}", w.spec.preset, w.spec.workers,
            w.status, describe.age(now - w.created_at),
            "-" if w.last_loss is None else f"{w.last_loss:.4f}"] for w in workspaces])
    return 0


def cmd_show(args) -> int:
    from core.backends import wandb_runs

    service = WorkspaceService()
    ws = service.get(args.id)
    state = service.status(args.id)
    data = {"id": ws.id, "cluster": ws.cluster, "status": state.status, "reason": state.reason,
            "workers": [w.__dict__ for w in state.workers], "last_loss": ws.last_loss,
            "run_dir": ws.run_dir, "history": service.events(ws.id), "spec": ws.spec.to_dict(),
            "wandb": service.wandb_run(ws.id), "utilization": service.utilization(ws.id),
            "watcher": service.watcher(ws.id)}
    if args.json:
        dump_json(data)
        return 0
    # reasons, details, history and the run's name are the cluster's and the workers' words
    print(printable(f"{ws.id}  {state.status}{'  (' + state.reason + ')' if state.reason else ''}"))
    print(f"  {printable(wandb_runs.summary(data['wandb'], ws.id))}")
    for worker in state.workers:
        print(printable(f"  {worker.name}: {worker.status} {worker.detail}").rstrip())
    if data["watcher"]:
        from core.kubernetes import watcher_history

        print(printable("  " + watcher_history.describe(data["watcher"], time.time())))
    if data["utilization"]:
        utilization_table(data["utilization"])
    for event in data["history"]:
        when = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(event['at']))
        print(printable(f"  {when} {event['kind']}{describe_record(event)}"))
    print(ws.spec.to_yaml().rstrip())
    return 0


def utilization_table(figures: dict[str, dict]) -> None:
    """Each worker's last logging interval: CPU (100% = one core), network wait, GPU where there is one."""
    from core.domain.run_events import natural_key

    gpus = any("gpu" in f or "gpu_memory_bytes" in f for f in figures.values())
    rows = []
    for name in sorted(figures, key=natural_key):
        f = figures[name]
        row = [f"  {name}", f"{100 * f['cpu']:.0f}%", f"{100 * f['wait_ratio']:.0f}%", f.get("step", "-")]
        if gpus:
            row += ["-" if "gpu" not in f else f"{f['gpu']:.0f}%",
                    "-" if "gpu_memory_bytes" not in f else f"{f['gpu_memory_bytes'] / 2 ** 30:.2f} GiB"]
        rows.append(row)
    table(["  worker", "cpu", "network wait", "at step"] + (["gpu", "gpu memory"] if gpus else []), rows)


def cmd_logs(args) -> int:
    from core.domain import run_events

    for worker, line in WorkspaceService().logs(args.id, follow=args.follow):
        readable = run_events.readable(line)
        if readable is not None and args.no_events:
            continue
        shown = line if args.raw or readable is None else run_events.MARK + readable
        print(printable(f"[{worker}] {shown}"), flush=True)  # a pod's bytes: no escape reaches the terminal
    return 0


def cmd_delete(args) -> int:
    service = WorkspaceService()
    print(service.what_will_be_lost(args.id))
    if not args.yes:
        if not sys.stdin.isatty():
            raise InvalidInput("refusing to delete without confirmation", "pass --yes")
        if input("Delete? [y/N] ").strip().lower() != "y":
            print("Cancelled; nothing was deleted.")
            return 1
    service.delete(args.id)
    print(f"Deleted {args.id}.")
    return 0
