"""`geotrain workspaces pods|shell`: one level down from a workspace (issue 43): its worker
processes or pods with state, restarts and last events, a describe-like detail, and a shell in a
worker's environment."""

from __future__ import annotations

import sys

from core.cli.output import dump_json, table
from core.domain.terminal_text import printable
from core.workspaces import WorkspaceService


def register(groups) -> None:
    sub = groups["workspaces"]
    p = sub.add_parser("pods", help="a workspace's worker processes or pods: state, restarts, last events")
    p.add_argument("id", complete="workspace")
    p.add_argument("--describe", action="store_true", help="each one's detail too (process or pod, env, last output)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_pods)
    p = sub.add_parser("shell", help="a shell in a worker: $SHELL in its environment and directory (local), "
                                          "or in its pod's container (exec)")
    p.add_argument("id", complete="workspace")
    p.add_argument("--rank", type=int, default=0, help="the worker (default 0; on Kubernetes the Nth pod `pods` lists)")
    p.set_defaults(handler=cmd_shell)


def cmd_pods(args) -> int:
    rows = WorkspaceService().processes(args.id)
    if args.json:
        dump_json([row.__dict__ for row in rows])
        return 0
    if not rows:
        print(f"{args.id} has no worker processes or pods now.")
        return 0
    pods = any(row.node for row in rows)
    headers = ["name", "node", "datacenter"] if pods else ["worker", "pid"]
    table(headers + ["state", "restarts", "last event"],
          [([r.name, r.node or "-", r.datacenter or "-"] if pods else [r.name, r.pid or "-"])
           + [r.state, r.restarts, r.events[-1] if r.events else "-"] for r in rows])
    if args.describe:
        for row in rows:
            print(f"\n{printable(row.name)}")
            width = max((len(key) for key, _ in row.detail), default=0)
            for key, value in row.detail:
                print(printable(f"  {key:<{width}}  {value}"))
            for event in row.events:
                print(printable(f"  event  {event}"))
    return 0


def cmd_shell(args) -> int:
    target = WorkspaceService().shell(args.id, args.rank)
    where = f", in {target.cwd}" if target.cwd else ""
    print(printable(f"A shell in {target.what}{where}; exit to come back."), file=sys.stderr)
    return target.run()
