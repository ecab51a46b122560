"""The node pool service (CLI and app): import servers over SSH, refresh, show, remove.

Importing several servers is all-or-nothing: every server is contacted and its facts
gathered first, in parallel; only when all succeed are the records written (one
transaction) and their host keys pinned.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.nodes import facts as node_facts
from core.schema.endpoints import check_host, check_port, check_user, parse_endpoint
from core.errors import GeotrainError, InvalidInput
from core.nodes.known_hosts import KnownHosts
from core.domain.datacenters import check_datacenter
from core.domain.records import NAME_RE, Node
from core.nodes.status import NodeStatus, status_for
from core.state.node_records import add_nodes, get_node, list_nodes, remove_node, update_node
from core.nodes.parallel import Timeout, run_each
from core.nodes.ssh_errors import AskPassphrase, ConfirmHostKey, SSHError
from core.state.store import Store

if TYPE_CHECKING:
    from core.nodes.ssh import Connection, KeyRing

PUBLIC_IP_URLS_ENV = "GEOTRAIN_PUBLIC_IP_URLS"  # comma-separated; empty string disables


@dataclass
class ImportRequest:
    """One server a user asks to import."""

    name: str
    host: str
    username: str
    port: int = 22
    key_path: str | None = None  # None: use the SSH agent
    jump: str | None = None  # [user@]host[:port]
    datacenter: str | None = None
    trust_host_key: str | None = None  # SHA256:… fingerprint confirmed in advance
    source: str = ""  # where it came from, e.g. "nodes.csv line 3", for error messages


@dataclass
class Prompts:
    """How to ask the person (CLI prompt, app dialog) — or not, in scripts."""

    confirm_host_key: ConfirmHostKey | None = None
    ask_passphrase: AskPassphrase | None = None
    trusted: set[str] = field(default_factory=set)


class ImportFailed(GeotrainError):
    pass


def public_ip_urls() -> tuple[str, ...]:
    value = os.environ.get(PUBLIC_IP_URLS_ENV)
    if value is None:
        return node_facts.public_ip.DEFAULT_URLS
    return tuple(u.strip() for u in value.split(",") if u.strip())


class NodePool:
    def __init__(self, store: Store | None = None, prompts: Prompts | None = None, *,
                 known_hosts: KnownHosts | None = None, connect_timeout: float = 10.0,
                 node_timeout: float = 45.0) -> None:
        self.store = store or Store()
        self.prompts = prompts or Prompts()
        self.known_hosts = known_hosts or KnownHosts()
        self.connect_timeout, self.node_timeout = connect_timeout, node_timeout
        self._prompt_lock = threading.Lock()  # one question on screen at a time
        self._keys: KeyRing | None = None
        self._keys_lock = threading.Lock()  # refreshes connect from several threads at once

    @property
    def keys(self) -> KeyRing:
        """The pool's private keys, loaded once each; paramiko loads with the first use, not
        with the app or the CLI."""
        with self._keys_lock:
            if self._keys is None:
                from core.nodes.ssh import KeyRing

                self._keys = KeyRing(self._ask_passphrase)
            return self._keys

    # prompts from worker threads are serialised --------------------------------
    def _confirm(self, label: str, key_type: str, fp: str) -> bool:
        if not self.prompts.confirm_host_key:
            return False
        with self._prompt_lock:
            return self.prompts.confirm_host_key(label, key_type, fp)

    def _ask_passphrase(self, path: str) -> str | None:
        if not self.prompts.ask_passphrase:
            return None
        with self._prompt_lock:
            return self.prompts.ask_passphrase(path)

    # reading -----------------------------------------------------------------------
    def list(self) -> list[Node]:
        return list_nodes(self.store)

    def show(self, name: str) -> Node:
        return get_node(self.store, name)

    def connection(self, node: Node) -> Connection:
        """A lazy SSH connection to a pooled node: its pinned host key, no questions asked
        (a changed key is accepted only when its fingerprint is in `prompts.trusted`)."""
        return self._connection(node, set(self.prompts.trusted), ask=False)

    # gathering facts -------------------------------------------------------------------
    def _connection(self, node: Node | ImportRequest, trusted: set[str], ask: bool) -> Connection:
        from core.nodes.ssh import Connection

        return Connection(node.host, node.port, node.username, key_path=node.key_path,
                          jump=node.jump, keys=self.keys, known_hosts=self.known_hosts,
                          trusted=trusted, confirm=self._confirm if ask else None,
                          connect_timeout=self.connect_timeout)

    def _gather(self, conn: Connection) -> dict:
        with conn:
            result = conn.run("sh -s", timeout=self.node_timeout,
                              stdin=node_facts.script(public_ip_urls()))
        if node_facts.MARKER not in result.stdout:
            raise SSHError(f"{conn.label}: the fact script did not run "
                           f"(exit {result.exit_code}: {(result.stderr or result.stdout).strip()[:200]})",
                           "geotrain needs a POSIX shell (sh) on the server")
        found = node_facts.parse_all(result.stdout)
        system = found["system"]["system"]
        if system != "Linux":
            raise InvalidInput(f"{conn.label} runs {system}, not Linux",
                               "geotrain nodes must be Linux servers; import another one")
        return found

    # importing ---------------------------------------------------------------------
    def _validate(self, requests: list[ImportRequest]) -> None:
        if not requests:
            raise InvalidInput("nothing to import", "give at least one server")
        existing = {n.name for n in self.list()}
        seen: set[str] = set()
        for req in requests:
            where = f"{req.source}: " if req.source else ""
            if not NAME_RE.fullmatch(req.name or ""):
                raise InvalidInput(f"{where}node name {req.name!r} is not valid",
                                   "use 1-32 lowercase letters, digits and dashes, e.g. gpu-1")
            if req.name in existing or req.name in seen:
                raise InvalidInput(f"{where}a node named {req.name!r} already exists",
                                   "choose another name, or `geotrain nodes remove` it first")
            if not req.host or not req.username:
                raise InvalidInput(f"{where}node {req.name!r} needs a host and a username",
                                   "give --endpoint HOST[:PORT] and --username")
            _check_address(req, where)
            seen.add(req.name)
        for path in sorted({r.key_path for r in requests if r.key_path}):
            self.keys.load(path)  # asks for passphrases up front, in this thread

    def import_nodes(self, requests: list[ImportRequest]) -> list[Node]:
        """Contact every server, gather facts; write all records or none."""
        self._validate(requests)

        def contact(req: ImportRequest) -> dict:
            trusted = set(self.prompts.trusted) | ({req.trust_host_key} if req.trust_host_key else set())
            return self._gather(self._connection(req, trusted, ask=True))

        outcomes = run_each(requests, contact, timeout=self.node_timeout + self.connect_timeout)
        failures = [(r, o) for r, o in zip(requests, outcomes) if isinstance(o, BaseException)]
        if failures:
            self.known_hosts.discard_pending()
            raise _import_failed(failures)
        nodes = []
        for req, found in zip(requests, outcomes):
            status, blockers = status_for(found, None)
            nodes.append(Node(name=req.name, host=req.host, port=req.port, username=req.username,
                              key_path=req.key_path, jump=req.jump, datacenter=req.datacenter,
                              status=status, blockers=blockers, facts=found))
        try:
            add_nodes(self.store, nodes)
        except GeotrainError:
            self.known_hosts.discard_pending()
            raise
        self.known_hosts.save()
        return nodes

    # refreshing --------------------------------------------------------------------
    def refresh(self, names: list[str] | None = None) -> list[Node]:
        """Gather facts again for the named nodes (all when none), in parallel."""
        nodes = [self.show(n) for n in names] if names else self.list()
        outcomes = run_each(nodes, lambda n: self._gather(self.connection(n)),
                            timeout=self.node_timeout + self.connect_timeout)
        for node, outcome in zip(nodes, outcomes):
            if isinstance(outcome, BaseException):
                node.status = NodeStatus.UNREACHABLE.value
                node.blockers = [_reason(outcome)]
            else:
                node.facts = outcome
                node.status, node.blockers = status_for(outcome, node.cluster)
            try:
                update_node(self.store, node)
            except GeotrainError:
                pass  # removed meanwhile: nothing to record
        self.known_hosts.save()  # keys re-pinned with --trust-host-key
        return nodes

    def remove(self, name: str) -> Node:
        node = self.show(name)
        if node.cluster:
            raise InvalidInput(f"node {name!r} is in cluster {node.cluster!r}",
                               f"remove it from the cluster first (or delete cluster {node.cluster!r})")
        remove_node(self.store, name)
        return node


def _check_address(req: ImportRequest, where: str) -> None:
    """Host, port, user and jump reach SSH, shells and configs: each checked in full."""
    try:
        check_host(req.host, f"host of {req.name}")
        check_port(req.port, f"port of {req.name}")
        check_user(req.username, f"username of {req.name}")
        if req.jump:
            parse_endpoint(req.jump, req.username)
        if req.datacenter:  # it becomes the node's Kubernetes zone label
            check_datacenter(req.datacenter, f"node {req.name}")
    except InvalidInput as exc:
        raise InvalidInput(f"{where}{exc.message}", exc.hint) from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, GeotrainError):
        return str(exc)
    if isinstance(exc, Timeout):
        return f"no answer in time ({exc})"
    return f"{type(exc).__name__}: {exc}"


def _import_failed(failures: list[tuple[ImportRequest, BaseException]]) -> ImportFailed:
    if len(failures) == 1 and isinstance(failures[0][1], GeotrainError):
        req, exc = failures[0]
        return ImportFailed(f"{req.name}: {exc.message}",
                            f"{exc.hint}; nothing was imported" if exc.hint else "nothing was imported")
    return ImportFailed("; ".join(f"{req.name}: {_reason(exc)}" for req, exc in failures),
                        "nothing was imported; fix the servers named and import again")
