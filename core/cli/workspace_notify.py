"""`geotrain workspaces notify ID`: tell a webhook when the workspace completes, fails or recovers
(issue 43). The address comes from GEOTRAIN_NOTIFY_URL or a hidden prompt, never the command line
(every local user can read argv), and is kept in the secret store (0600), never shown again.
`--command CMD` runs a local program instead (or as well), the event as JSON on its stdin, no shell.
On a Kubernetes workspace the address goes into the workspace's Secret `<job>-notify` instead and the
watcher in the cluster sends (core.backends.kubernetes_notify); a command, which would run on this
machine, is refused there."""

from __future__ import annotations

import getpass
import os
import sys

from core.domain.notifications import EVENTS, URL_ENV, command_ref, secret_ref
from core.errors import InvalidInput
from core.workspaces import WorkspaceService


def register(groups) -> None:
    sub = groups["workspaces"]
    p = sub.add_parser("notify", help=f"send {', '.join(EVENTS)} of a workspace to a webhook "
                                      f"(the URL from {URL_ENV} or a hidden prompt)")
    p.add_argument("id", complete="workspace")
    p.add_argument("--ask", action="store_true", help="type the webhook's URL (hidden), even with the variable set")
    p.add_argument("--command", metavar="CMD", help="also run this program on each event, the event as JSON on its "
                   "stdin (split like a shell would, run without one; keep secrets in the program, not its words)")
    p.add_argument("--off", action="store_true", help="stop notifying; the URL and command are removed")
    p.add_argument("--test", action="store_true", help="send a test message now")
    p.set_defaults(handler=cmd_notify)


def cmd_notify(args) -> int:
    from core.backends.local import notifier

    service = WorkspaceService()
    ws = service.get(args.id)
    backend = service.backend(ws.cluster)
    if backend.WEBHOOK_IN_CLUSTER:
        return _in_cluster(args, backend, ws.id)
    if not backend.NOTIFIES:
        raise InvalidInput(f"{ws.id} runs on cluster {ws.cluster!r}, whose workspaces send no notifications",
                           "use a local or Kubernetes workspace, or watch `geotrain workspaces show ID`")
    if args.off:
        notifier.forget(service.secrets, ws.id)
        print(f"{ws.id} notifies no one now.")
        return 0
    if args.command is not None:
        notifier.keep(service.secrets, ws.id, command=args.command)
        print(f"{ws.id} will run {notifier.shown(service.secrets, ws.id)[1]} on {', '.join(EVENTS)} "
              "(the event as JSON on its stdin).")
    url = None if args.ask else os.environ.get(URL_ENV)
    kept = service.secrets.get(secret_ref(ws.id)) or service.secrets.get(command_ref(ws.id))
    if url is None and (args.ask or not (args.command is not None or (args.test and kept))):
        if not (args.ask or sys.stdin.isatty()):
            raise InvalidInput(f"no webhook URL: {URL_ENV} is not set",
                               f"set {URL_ENV}, pass --ask at a terminal, or give --command CMD")
        url = getpass.getpass("Webhook URL (hidden): ").strip()
    if url is not None:
        notifier.keep(service.secrets, ws.id, url=url)
        print(f"{ws.id} will notify the webhook of {', '.join(EVENTS)} (its URL is in the secret store; not shown).")
    if args.test:
        run_dir = service.backend(ws.cluster).run_dir(ws.id)
        if not notifier.Notifier(run_dir, ws.id, service.secrets, []).send("TEST", "a test of this workspace's notifications"):
            raise InvalidInput("the test message was not delivered", f"see {run_dir / 'logs' / 'launcher.log'}")
        print("The test message was delivered.")
    return 0


def _url(args) -> str:
    url = None if args.ask else os.environ.get(URL_ENV)
    if url is None:
        if not (args.ask or sys.stdin.isatty()):
            raise InvalidInput(f"no webhook URL: {URL_ENV} is not set", f"set {URL_ENV}, or pass --ask at a terminal")
        url = getpass.getpass("Webhook URL (hidden): ").strip()
    return url


def _in_cluster(args, backend, workspace_id: str) -> int:
    """A Kubernetes workspace: the watcher in the cluster sends, from the address in its Secret."""
    if args.command is not None:
        raise InvalidInput(f"{workspace_id} runs on Kubernetes: a notification command would run on this machine, "
                           "so only a webhook is sent from the cluster", "drop --command; give the webhook's URL")
    if args.off:
        backend.clear_notify(workspace_id)
        print(f"{workspace_id} notifies no one now (its notify Secret is deleted).")
        return 0
    if args.test:
        raise InvalidInput(f"{workspace_id} runs on Kubernetes: its messages are sent by the watcher in the cluster, "
                           "not from here", "drop --test; COMPLETED, FAILED and RECOVERED arrive as they happen")
    backend.set_notify_url(workspace_id, _url(args))
    print(f"{workspace_id} will notify the webhook of {', '.join(EVENTS)}, sent by its watcher in the cluster "
          "(the URL is in a Kubernetes Secret; not shown).")
    return 0
