"""`geotrain workspaces export|sync|metrics`: keep a workspace's results, upload its offline W&B run,
hand its figures to Prometheus."""

from __future__ import annotations

import getpass
import os

from core.cli.output import dump_json
from core.cli.prompts import _interactive
from core.domain.terminal_text import printable
from core.workspaces import WorkspaceService, check_token


def register(groups) -> None:
    sub = groups["workspaces"]
    p = sub.add_parser("export", help="copy checkpoints, metrics, logs and config into a directory")
    p.add_argument("id", complete="workspace")
    p.add_argument("dir", help="a new or empty directory (restore with `deploy --resume-from DIR`)")
    p.add_argument("--json", action="store_true", help="print the export's manifest as JSON")
    p.set_defaults(handler=cmd_export)
    p = sub.add_parser("sync", help="upload a workspace's offline W&B run (key from WANDB_API_KEY)")
    p.add_argument("id", complete="workspace")
    p.add_argument("--ask-key", action="store_true", help="type the W&B API key (hidden)")
    p.set_defaults(handler=cmd_sync)
    p = sub.add_parser("metrics", help="each worker's CPU, network wait and GPU, with the loss and bytes sent")
    p.add_argument("id", complete="workspace")
    p.add_argument("--openmetrics", action="store_true",
                   help="print OpenMetrics text (for Prometheus: a textfile collector or a pushgateway)")
    p.set_defaults(handler=cmd_metrics)


def cmd_export(args) -> int:
    from core.backends.export import human_bytes
    from core.domain.run_events import one_line

    manifest = WorkspaceService().export(args.id, args.dir)
    if args.json:
        dump_json(manifest)
        return 0
    total = sum(f["bytes"] for f in manifest["files"].values())
    steps = manifest["checkpoint_steps"]
    print(f"Exported {args.id} to {args.dir}: {len(manifest['files'])} files, {human_bytes(total)}; "
          + (f"checkpoints at steps {', '.join(map(str, steps))}." if steps else "no checkpoints."))
    if not manifest["checkpoints_copied"]:
        print(f"Checkpoints NOT exported: {printable(manifest['checkpoints_not_copied'])}. They stay in the "
              "workspace's volume until it is deleted; recovery.hf_repo keeps a copy on the HF Hub.")
    if manifest["skipped"]:
        shown = ", ".join(one_line(name) for name in manifest["skipped"][:5])  # names the pod chose
        shown += " …" if len(manifest["skipped"]) > 5 else ""
        print(f"Skipped {len(manifest['skipped'])} links or other non-checkpoint files (never followed): {shown}")
    if steps:
        print(f"Continue it with `geotrain workspaces deploy distributed-training --resume-from {args.dir}`.")
    return 0


def wandb_key(service: WorkspaceService, workspace_id: str, ask: bool) -> str | None:
    """The key from the environment, the workspace's stored token, or typed (hidden) — never argv."""
    key = os.environ.get("WANDB_API_KEY")
    ref = service.get(workspace_id).spec.tokens.get("wandb")
    if not key and ref:
        key = service.secrets.get(ref)
    if not key and (ask or _interactive()):
        key = getpass.getpass("W&B API key (hidden, empty to cancel): ").strip() or None
    if key:
        check_token("wandb", key)
    return key


def cmd_sync(args) -> int:
    from core.backends import wandb_runs  # loaded by this command alone, not with the command tree

    service = WorkspaceService()
    info = service.wandb_run(args.id)
    wandb_runs.check_syncable(info)
    output = wandb_runs.sync(info, wandb_key(service, args.id, args.ask_key))
    for line in output.rstrip().splitlines():  # wandb's words about a run the workers named
        print(printable(line))
    print(f"Synced the offline W&B run of {args.id} (project {info.get('project')}).")
    return 0


def cmd_metrics(args) -> int:
    from core.domain import openmetrics

    service = WorkspaceService()
    utilization, rows = service.utilization(args.id), service.metrics(args.id)
    if args.openmetrics:
        print(openmetrics.render(args.id, utilization, rows), end="")
        return 0
    from core.cli.workspaces import utilization_table

    last = next((row for row in reversed(rows) if row.get("loss") is not None), None)
    if last is not None:
        print(f"step {last.get('step')}: loss {last['loss']:.4f}, {last.get('bytes_sent', 0):,} bytes sent by worker-0")
    if utilization:
        utilization_table(utilization)
    if last is None and not utilization:
        print(f"No figures from {args.id} yet: workers report them every logging.log_every steps.")
    return 0
