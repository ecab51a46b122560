"""One node's command channel during a deploy: facts, changes, files, all recorded.

Every command goes through here so that the command log (what tests check for a no-op
re-run), the per-node log file and dry-run share one path; secrets are redacted before
anything is written, and dry-run answers every fact as "absent" without connecting.
"""

from __future__ import annotations

import hashlib
import shlex
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from core.state.secret_store import redact


class Shell(Protocol):
    """What a session needs from an SSH connection (core.nodes.ssh.Connection fits)."""

    def run(self, command: str, timeout: float = ..., sudo: bool = ...): ...

    def put(self, data: bytes | Path, remote_path: str, mode: int = ..., sudo: bool = ...): ...


@dataclass
class Result:
    exit_code: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class CommandRecord:
    """One command issued to a node: `kind` is fact (reads), change, or put (a file)."""

    node: str
    step: str
    kind: str
    command: str
    exit_code: int | None = None
    seconds: float = 0.0
    content: str | None = None  # the file text for puts (None for secret files)


def file_state(path: str) -> str:
    """A fact: the file's sha256 and mode (what ensure_file compares)."""
    quoted = shlex.quote(path)
    parent = shlex.quote(str(Path(path).parent))
    return (f"test -d {parent} || echo nodir; sha256sum {quoted} 2>/dev/null;"
            f" stat -c %a {quoted} 2>/dev/null")


class StepFailed(Exception):
    """A step could not finish on one node; the message names the node and the cause."""


@dataclass
class CommandLog:
    """Every command of a deploy, across nodes, in issue order (thread-safe)."""

    records: list[CommandRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: CommandRecord) -> None:
        with self._lock:
            self.records.append(record)

    def changes(self, node: str | None = None) -> list[CommandRecord]:
        return [r for r in self.records
                if r.kind != "fact" and (node is None or r.node == node)]

    def for_node(self, node: str) -> list[CommandRecord]:
        return [r for r in self.records if r.node == node]


class NodeSession:
    def __init__(self, node: str, shell: Shell | None, log_path: Path | None,
                 command_log: CommandLog, secrets: list[str], dry_run: bool = False,
                 sudo: bool = True) -> None:
        self.node = node
        self.shell = shell
        self.command_log = command_log
        self.secrets = secrets
        self.dry_run = dry_run
        self.sudo = sudo
        self.step = "-"
        self.dirs_made: set[str] = set()  # made by earlier changes (probed facts predate them)
        self._log = open(log_path, "a", encoding="utf-8") if log_path else None

    def close(self) -> None:
        if self._log:
            self._log.close()
            self._log = None

    def note(self, message: str) -> None:
        """A line in this node's log file (redacted)."""
        if self._log:
            stamp = time.strftime("%H:%M:%S")
            self._log.write(f"{stamp} [{self.step}] {redact(message, self.secrets)}\n")
            self._log.flush()

    def _issue(self, kind: str, command: str, timeout: float, sudo: bool | None = None) -> Result:
        record = self._record(kind, command)
        if self.dry_run:
            record.exit_code = 1 if kind == "fact" else 0
            return Result(record.exit_code)
        started = time.monotonic()
        raw = self.shell.run(command, timeout=timeout, sudo=self.sudo if sudo is None else sudo)
        record.seconds = time.monotonic() - started
        result = Result(raw.exit_code, raw.stdout, raw.stderr)
        record.exit_code = result.exit_code
        if not result.ok:
            self.note(f"  exit {result.exit_code}: {result.stderr.strip()[-500:]}")
        return result

    def fact(self, command: str, timeout: float = 30, sudo: bool | None = None) -> Result:
        """Run a read-only command (never counted as a change)."""
        return self._issue("fact", command, timeout, sudo)

    def probe(self, commands: dict[str, str], timeout: float = 60) -> dict[str, Result]:
        """Run several read-only commands in one round trip; a Result per key.

        A round trip per fact would dominate a re-run (SSH exec and the login shell cost
        far more than the facts themselves).
        """
        if not commands:
            return {}
        script = "".join(f"echo '@@gt {key}'; ( {cmd} ) 2>/dev/null </dev/null;"
                         " printf '\\n@@rc %s\\n' $?\n" for key, cmd in commands.items())
        raw = self.fact(script, timeout=timeout)
        results = {key: Result(1) for key in commands}
        key, lines = None, []
        for line in raw.stdout.splitlines():
            if line.startswith("@@gt "):
                key, lines = line[5:], []
            elif line.startswith("@@rc ") and key in results:
                code = line[5:].strip()
                if lines and not lines[-1]:
                    lines.pop()
                results[key] = Result(int(code) if code.isdigit() else 1,
                                      "\n".join(lines) + ("\n" if lines else ""))
                key = None
            elif key is not None:
                lines.append(line)
        return results

    def change(self, command: str, timeout: float = 120, check: bool = True,
               what: str = "") -> Result:
        """Run a command that changes the node; raise StepFailed if it fails and check."""
        result = self._issue("change", command, timeout)
        if check and not result.ok:
            lines = (result.stderr or result.stdout).strip().splitlines()
            detail = redact(lines[-1] if lines else f"exit code {result.exit_code}",
                            self.secrets)
            raise StepFailed(f"{what or shlex.split(command)[0]} failed: {detail}")
        return result

    def change_all(self, commands: list[tuple[str, str]], timeout: float = 120) -> None:
        """Run changes [(command, what)] in order in one round trip; stop at the first failure.

        Each is recorded (and shown by a dry run) as its own command.
        """
        records = [self._record("change", command) for command, _ in commands]
        script = "".join(f"( {cmd} ) || {{ rc=$?; echo '@@failed {i}'; exit $rc; }}\n"
                         for i, (cmd, _) in enumerate(commands))
        if self.dry_run or not commands:
            return
        started = time.monotonic()
        raw = self.shell.run(script, timeout=timeout, sudo=self.sudo)
        records[0].seconds = time.monotonic() - started  # one round trip for all of them
        for record in records:
            record.exit_code = raw.exit_code
        if raw.exit_code != 0:
            failed = [line for line in raw.stdout.splitlines() if line.startswith("@@failed ")]
            index = int(failed[-1].split()[1]) if failed else len(commands) - 1
            lines = (raw.stderr or "").strip().splitlines()
            detail = redact(lines[-1] if lines else f"exit code {raw.exit_code}", self.secrets)
            self.note(f"  exit {raw.exit_code} at: {commands[index][0]}: {detail}")
            failure = StepFailed(f"{commands[index][1]} failed: {detail}")
            failure.index = index
            raise failure

    def _record(self, kind: str, command: str) -> CommandRecord:
        record = CommandRecord(self.node, self.step, kind, redact(command, self.secrets),
                               exit_code=0 if self.dry_run else None)
        self.command_log.add(record)
        self.note(f"{kind}: {record.command}")
        return record

    def put(self, path: str, content: str | bytes | Path, mode: int = 0o644,
            secret: bool = False) -> None:
        """Write a file on the node (over SFTP: the content never appears in argv); a local
        Path is streamed, not read whole."""
        binary = not isinstance(content, str)
        shown = None if secret or binary else redact(content, self.secrets)
        record = CommandRecord(self.node, self.step, "put",
                               f"put {path} mode {mode:o}", content=shown)
        self.command_log.add(record)
        size = content.stat().st_size if isinstance(content, Path) else len(content)
        self.note(f"put: {path} ({size} bytes, mode {mode:o}"
                  f"{', secret' if secret else ''})")
        if self.dry_run:
            record.exit_code = 0
            return
        started = time.monotonic()
        self.shell.put(content if binary else content.encode(), path, mode=mode,
                       sudo=self.sudo)
        record.seconds = time.monotonic() - started
        record.exit_code = 0

    def ensure_file(self, path: str, content: str, mode: int = 0o644,
                    secret: bool = False, current: Result | None = None) -> bool:
        """Write `path` only if its content or mode differ; True when it was written.

        `current` is the output of `file_state(path)` when already probed.
        """
        want = hashlib.sha256(content.encode()).hexdigest()
        have = current or self.fact(file_state(path))
        lines = have.stdout.split()
        if have.ok and len(lines) >= 3 and lines[0] == want and lines[2] == f"{mode:o}":
            return False
        parent = str(Path(path).parent)
        if ("nodir" in lines or self.dry_run) and parent not in self.dirs_made:
            self.change(f"mkdir -p {shlex.quote(parent)}", what=f"creating {parent}")
            self.dirs_made.add(parent)
        self.put(path, content, mode=mode, secret=secret)
        return True
