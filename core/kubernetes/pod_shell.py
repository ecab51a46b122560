"""A shell in a running pod with `kubectl exec -it` semantics, through the client's websocket
(kubernetes.stream.stream over connect_get_namespaced_pod_exec), relayed to this terminal.

As kubectl does it (kubernetes/kubectl pkg/cmd/exec/exec.go, ExecOptions.Run): stdin goes to the
container; with a TTY (-t) the terminal is put in raw mode and stderr is not asked for separately
(the TTY carries both streams on stdout); without one stdout and stderr come on their own channels.
The window size goes on the v4 channel protocol's resize channel 4 as {"Width", "Height"}
(client-go tools/remotecommand, TerminalSize; the Python client's RESIZE_CHANNEL). The command
is fixed: nothing a user typed reaches the pod's argv.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import sys
from typing import Any, BinaryIO

from kubernetes import client
from kubernetes.stream import stream
from websocket import WebSocketException

from core.errors import InvalidInput

# bash where the image has it (the upstream PyTorch images do), sh otherwise
SHELL_COMMAND = ["/bin/sh", "-c", "command -v bash >/dev/null 2>&1 && exec bash -il || exec sh -i"]
STDOUT, STDERR, ERROR, RESIZE = 1, 2, 3, 4
POLL_S = 0.1
READ_BYTES = 4096


def pick_pod(pods: list[dict[str, Any]], rank: int, workspace_id: str) -> str:
    """The Nth pod in `workspaces pods` order, which must be running (exec needs a live container)."""
    if not 0 <= rank < len(pods):
        raise InvalidInput(f"--rank {rank} is not a pod of {workspace_id} (it has {len(pods)}: ranks 0-{len(pods) - 1})"
                           if pods else f"{workspace_id} has no pods now",
                           "pick a rank from `geotrain workspaces pods ID`")
    pod = pods[rank]
    name = pod["metadata"]["name"]
    phase = (pod.get("status") or {}).get("phase")
    if phase != "Running":
        raise InvalidInput(f"pod {name} is {phase or 'Pending'}, not Running: there is no container to open a shell in",
                           "see `geotrain workspaces pods ID --describe`; recovery.keep_failed_pods keeps a failed one")
    return name


def open_exec(api: client.ApiClient, pod: str, namespace: str, container: str, tty: bool):
    """The exec websocket (a WSClient, binary frames) running SHELL_COMMAND in the pod."""
    return stream(client.CoreV1Api(api).connect_get_namespaced_pod_exec, pod, namespace, container=container,
                  command=SHELL_COMMAND, stdin=True, stdout=True, stderr=not tty, tty=tty,
                  _preload_content=False, binary=True)


def exit_code(status_text: bytes | str) -> int:
    """The remote command's exit code from the error channel's Status: Success is 0; a failure
    names it as the cause of reason ExitCode (kubernetes/apimachinery pkg/util/remotecommand,
    NonZeroExitCodeReason / ExitCodeCauseType); nothing said (the stream just closed) is 0."""
    if not status_text:
        return 0
    try:
        status = json.loads(status_text)
    except ValueError:
        return 1
    if not isinstance(status, dict) or status.get("status") == "Success":
        return 0 if isinstance(status, dict) else 1
    causes = (status.get("details") or {}).get("causes") or []
    code = next((c.get("message") for c in causes if isinstance(c, dict) and c.get("reason") == "ExitCode"), "")
    return int(code) if isinstance(code, str) and code.isdigit() and len(code) < 4 else 1


def _drain(ws, out: BinaryIO, err: BinaryIO) -> None:
    for channel, sink in ((STDOUT, out), (STDERR, err)):
        if ws.peek_channel(channel):
            data = ws.read_channel(channel)
            sink.write(data if isinstance(data, bytes) else data.encode())
            sink.flush()


def relay(ws, stdin_fd: int, out: BinaryIO, err: BinaryIO) -> int:
    """Copy this terminal's input to the pod and the pod's output here until the stream closes;
    the remote command's exit code (from the error channel)."""
    while ws.is_open():
        ws.update(timeout=POLL_S)
        _drain(ws, out, err)
        if stdin_fd >= 0 and select.select([stdin_fd], [], [], 0)[0]:
            data = os.read(stdin_fd, READ_BYTES)
            if not data:
                stdin_fd = -1  # end of input: the pod's shell sees it when the stream closes
            else:
                try:
                    ws.write_stdin(data)
                except (OSError, WebSocketException):  # the pod's side closed (its shell exited)
                    stdin_fd = -1
    _drain(ws, out, err)
    return exit_code(ws.read_channel(ERROR))


def close(ws) -> None:
    """Close the stream; the pod's side may have closed it already (its shell exited): a close
    frame sent then meets a broken pipe, which is no error of the session's."""
    try:
        ws.close()
    except (OSError, WebSocketException):
        pass


def run_shell(api: client.ApiClient, pod: str, namespace: str, container: str) -> int:
    """`kubectl exec -it POD -c CONTAINER -- sh` on this process's terminal (raw mode while it
    runs, restored after), or without a TTY when stdin is not one (a pipe, a script)."""
    fd = sys.stdin.fileno()
    tty = os.isatty(fd)
    ws = open_exec(api, pod, namespace, container, tty)
    saved = None
    try:
        if tty:
            import termios
            import tty as tty_mode

            size = shutil.get_terminal_size()
            try:
                ws.write_channel(RESIZE, json.dumps({"Width": size.columns, "Height": size.lines}))
            except (OSError, WebSocketException):  # already closed: relay reads what came, then ends
                pass
            saved = termios.tcgetattr(fd)
            tty_mode.setraw(fd)
        return relay(ws, fd, sys.stdout.buffer, sys.stderr.buffer)
    finally:
        if saved is not None:
            import termios

            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        close(ws)
