"""Elastic DiLoCo: the outer step is taken by whichever workers are present.

torch.distributed groups are fixed for life, so a dead worker would hang the others.
Instead each worker talks to a store outside the workers (a FileStore in the run's
private directory, recipes.private_store: no port that another host or user could reach)
and, per outer step, the workers that arrive form a quorum and
a fresh gloo group of just those members (the torchft idea, written small):

- a worker heartbeats into the store; a peer whose heartbeat stops for
  `heartbeat_timeout_s` is not waited for, an alive but late one at most `join_timeout_s`;
- live members average their pseudo-gradients over the members present;
- a restarted worker registers as a joiner: it receives the current global weights,
  outer momentum, outer step and step count from a live member, then trains on;
- when no live member exists (first start, or every worker was lost) the quorum is
  "cold": members bring their newest complete checkpoint and the newest one wins.

Across datacenters (GEOTRAIN_DATACENTER names this worker's) every datacenter present counts
once in the average and full-precision exchanges run hierarchically (recipes.elastic_groups);
the store is then recipes.elastic_store's server: GEOTRAIN_ELASTIC_STORE=geotrain-store://HOST:PORT,
its token in the file named by GEOTRAIN_ELASTIC_STORE_TOKEN_FILE.

Settings (set by the backend): GEOTRAIN_ELASTIC_STORE=/path/of/the/store/file or geotrain-store://HOST:PORT,
GEOTRAIN_ELASTIC_GEN, GEOTRAIN_DATACENTER, GEOTRAIN_ELASTIC_JOIN_TIMEOUT_S, GEOTRAIN_ELASTIC_HEARTBEAT_TIMEOUT_S,
GEOTRAIN_ELASTIC_OP_TIMEOUT_S.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from recipes.algorithms.exchange import FullPrecisionExchange
from recipes.elastic_groups import ElasticWire, Liveness, by_datacenter, dc_weight, weighted_start
from recipes.elastic_quorum import parse_members
from recipes.private_store import ELASTIC_STORE_ENV, open_file_store
from recipes.telemetry import emit, say

STORE_ENV = ELASTIC_STORE_ENV
DATACENTER_ENV = "GEOTRAIN_DATACENTER"
MAX_ATTEMPTS = 5
__all__ = ["emit"]  # recipes.train reports through elastic.emit


class ElasticError(RuntimeError):
    pass


@dataclass
class Member:
    rank: int
    role: str  # "live" (holds the current global weights) or "join"
    checkpoint: int  # newest complete checkpoint step it holds (-1 none)
    dc: str = ""  # its datacenter ("": the one datacenter of a flat run)


def _parse(raw: bytes) -> list[Member]:
    """Members in rank order; a rank that registered twice counts once (its last entry)."""
    return [Member(*fields) for fields in parse_members(raw)]


def _encode(members: list[Member]) -> str:
    return "".join(f"{m.rank}:{m.role}:{m.checkpoint}" + (f":{m.dc}" if m.dc else "") + ";" for m in members)


class Membership:
    """One worker's side of the elastic outer loop (see the module docstring)."""

    def __init__(self, rank: int, world: int, store_path: str, gen: str, *, join_timeout: float,
                 heartbeat_timeout: float, op_timeout: float, datacenter: str = "") -> None:
        self.rank, self.world, self.dc = rank, world, datacenter
        self.join_timeout, self.hb_timeout = join_timeout, heartbeat_timeout
        self.op_timeout = timedelta(seconds=op_timeout)
        self.prefix = f"gen{gen}/"
        self._path = store_path
        self.store = self._connect()
        self.liveness = Liveness(self.store, world, heartbeat_timeout)
        self.wire = ElasticWire(world)
        self.trainer = None
        self._beating = threading.Event()
        self._stop = threading.Event()
        self._heart: threading.Thread | None = None

    def _connect(self):
        from recipes.elastic_store_client import from_url

        store = from_url(self._path, timedelta(seconds=60), self.prefix)  # None: a file path
        return store or dist.PrefixStore(self.prefix, open_file_store(self._path, timedelta(seconds=60)))

    # heartbeat --------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        if self._beating.is_set():
            return
        self._beating.set()
        store = self._connect()  # its own handle: the main one may block
        interval = max(0.05, self.hb_timeout / 5)

        def beat() -> None:
            while not self._stop.is_set():
                try:
                    store.add(f"hb/{self.rank}", 1)
                except Exception:
                    pass  # the store is gone or slow; the quorum logic bounds every wait
                self._stop.wait(interval)

        self._heart = threading.Thread(target=beat, name="elastic-heartbeat", daemon=True)
        self._heart.start()
        atexit.register(self.close)  # a thread inside a store call at exit would abort the process

    def close(self) -> None:
        self._stop.set()
        if self._heart is not None:
            self._heart.join(timeout=5)

    # store helpers ------------------------------------------------------------
    def _current(self) -> int | None:
        return int(self.store.get("outer/current")) if self.store.check(["outer/current"]) else None

    def finished(self) -> bool:
        return self.store.check(["finished"])

    def mark_finished(self) -> None:
        self.store.set("finished", "1")

    def _group(self, key: str, ranks: list[int]):
        if len(ranks) == 1:
            return None
        store = dist.PrefixStore(key, self.store)
        return dist.ProcessGroupGloo(store, ranks.index(self.rank), len(ranks), self.op_timeout)

    def _quorum(self, key: str, me: Member, *, can_close: bool, wait_all: bool,
                behind: int | None = None) -> list[Member] | None:
        """Register under `key`, wait until the members are decided; None if left out."""
        self.store.append(f"{key}/joined", _encode([me]))
        self._start_heartbeat()
        start = time.monotonic()
        limit = self.join_timeout + 2 * self.hb_timeout + self.op_timeout.total_seconds()
        reported: set[int] | None = None  # the missing ranks last reported (first start only)
        while not self.store.check([f"{key}/members"]):
            waited = time.monotonic() - start
            current = self._current() if behind is not None else None
            if current is not None and current >= behind:
                return None  # the others finished this outer step without us
            if can_close:
                joined = _parse(self.store.get(f"{key}/joined"))
                expected = set(range(self.world)) if wait_all else self.liveness.alive()
                missing = expected - {m.rank for m in joined}
                if wait_all and missing != reported and (reported is not None or waited > 1.0):
                    reported = missing
                    emit("rendezvous", stage="waiting", rank=self.rank, world=self.world,
                         missing=sorted(missing))
                if not expected - {m.rank for m in joined} or waited > self.join_timeout:
                    self.store.compare_set(f"{key}/members", "", _encode(joined))
                    continue
            elif waited > limit:
                return None
            time.sleep(0.02)
        members = _parse(self.store.get(f"{key}/members"))
        return members if any(m.rank == self.rank for m in members) else None

    # live workers: the outer step ---------------------------------------------
    def attach(self, trainer) -> None:
        """Route the algorithm's outer step through the quorum (DiLoCo only)."""
        self.trainer = trainer
        algo = trainer.algo
        if getattr(algo, "overlap", False):
            say(self.rank, "elastic mode: overlap is turned off (an outer step must land before members change)")
            algo.stop_overlap()
        self._inner_sync = algo.sync
        algo.sync = self.outer_sync
        # an all-reduce of full precision averages per datacenter itself (hierarchically); a gathered
        # exchange gets each member's pseudo-gradient weighted so that every datacenter counts once
        self._hierarchical = isinstance(algo.exchange, FullPrecisionExchange)
        if not self._hierarchical:
            algo.exchange.start = weighted_start(algo.exchange, self.wire)

    def outer_sync(self) -> None:
        algo = self.trainer.algo
        s = algo.outer_step + 1
        for attempt in range(MAX_ATTEMPTS):
            key = f"q/{s}/{attempt}"
            members = self._quorum(key, Member(self.rank, "live", -1, self.dc), can_close=True,
                                   wait_all=False, behind=s)
            if members is None:
                say(self.rank, f"outer step {s} went ahead without this worker: rejoining")
                if not self.join(reason="late for an outer step"):
                    raise ElasticError("the run finished while this worker was rejoining")
                return
            live = [m.rank for m in members if m.role == "live"]
            dcs = by_datacenter([m for m in members if m.role == "live"])
            try:
                self._use_groups(key, live, dcs)
                self._inner_sync()
            except RuntimeError as exc:
                say(self.rank, f"outer step {s} with {live} failed ({str(exc)[:120]}); retrying")
                continue
            finally:
                self.wire.release()
            if len(live) < self.world or self.dc:
                emit("outer_step", rank=self.rank, step=s, members=live, world=self.world,
                     **({"datacenters": dcs, "wan_bytes": self.wire.bytes_sent, "lan_bytes": self.wire.lan_bytes}
                        if self.dc else {}))
            if len(members) > len(live):
                self._send_state(f"{key}/all/", members, live[0])
            if self.rank == live[0]:
                self.store.set("outer/current", str(s))
                if s > 2 and hasattr(self.store, "delete_prefix"):  # the network store: bounded keys
                    self.store.delete_prefix(f"q/{s - 2}/")  # nobody reads a quorum two steps behind
            return
        raise ElasticError(f"outer step {s} failed {MAX_ATTEMPTS} times")

    def _use_groups(self, key: str, live: list[int], dcs: dict[str, list[int]]) -> None:
        """The wire's groups for this outer step: every live member, and across datacenters my
        datacenter's members and (a leader: its first member) the leaders."""
        flat = lambda: self._group(f"{key}/live/", live)  # noqa: E731
        if len(dcs) < 2 or not self._hierarchical:
            self.wire.use(flat, len(live))
            self.wire.weight = dc_weight(self.rank, dcs) if len(dcs) > 1 else 1.0
            self.wire.inside_dc = bool(self.dc) and len(dcs) == 1
            return
        name, mine = next((n, r) for n, r in dcs.items() if self.rank in r)
        local = self._group(f"{key}/dc/{name}/", mine)
        leaders = [r[0] for r in dcs.values()]
        wan = self._group(f"{key}/wan/", leaders) if self.rank == mine[0] else None
        self.wire.use(flat, len(live), local, wan, len(mine), len(leaders))

    # joiners: fetch the global state ------------------------------------------
    def join(self, reason: str = "start") -> bool:
        """Become a live member: warm (from a live peer) or cold (newest checkpoint wins).
        False when the others have already finished the run."""
        trainer = self.trainer
        started = time.time()
        held = trainer.step if trainer.resumed_from is not None else -1
        emit("rendezvous", stage="waiting", rank=self.rank, world=self.world, reason=reason)
        deadline = time.monotonic() + 10 * (self.join_timeout + self.hb_timeout) + 60
        attempt = 0
        while time.monotonic() < deadline:
            if self.finished():
                return False
            current = self._current()
            me = Member(self.rank, "join", held, self.dc)
            if current is None:
                members = self._quorum(f"q/cold/{attempt}", me, can_close=True, wait_all=True)
            else:
                members = self._quorum(f"q/{current + 1}/0", me, can_close=False, wait_all=False)
            attempt += 1
            if members is None:
                continue
            live = [m.rank for m in members if m.role == "live"]
            if live:
                source = live[0]
            else:
                source = max(members, key=lambda m: (m.checkpoint, -m.rank)).rank
            key = f"q/cold/{attempt - 1}/all/" if current is None else f"q/{current + 1}/0/all/"
            try:
                self._receive_state(key, members, source)
            except RuntimeError as exc:
                say(self.rank, f"state transfer failed ({str(exc)[:120]}); trying again")
                continue
            if self.rank == source and not live:
                self.store.set("outer/current", str(trainer.algo.outer_step))
            emit("rejoined" if current is not None else "joined", rank=self.rank, reason=reason,
                 step=trainer.step, outer_step=trainer.algo.outer_step, source=source,
                 members=[m.rank for m in members], seconds=round(time.time() - started, 3))
            return True
        raise ElasticError("could not join the other workers in time")

    # state transfer -------------------------------------------------------------
    def _state_tensors(self) -> list[torch.Tensor]:
        algo = self.trainer.algo
        # the step whose sync withheld the look-ahead (-1: none): a worker that joins after the run's
        # last sync must neither sync again nor, resumed with more steps, forget the look-ahead
        withheld = -1 if algo.withheld_at is None else algo.withheld_at
        header = torch.tensor([algo.outer_step, self.trainer.step, withheld], dtype=torch.int64)
        return [header, algo.global_flat, algo.momentum]

    def _send_state(self, key: str, members: list[Member], source: int) -> None:
        try:
            self._broadcast(key, members, source)
        except RuntimeError as exc:
            say(self.rank, f"sending the global state to joiners failed: {str(exc)[:120]}")

    def _receive_state(self, key: str, members: list[Member], source: int) -> None:
        self._broadcast(key, members, source)
        algo = self.trainer.algo
        algo.anchor = algo.global_flat.clone()
        if hasattr(algo.exchange, "syncs"):  # a subset exchange draws by sync number: the source's outer step
            algo.exchange.syncs = algo.outer_step
        algo._write_params(algo.global_flat)
        set_step(self.trainer, self.trainer.step)

    def _broadcast(self, key: str, members: list[Member], source: int) -> None:
        ranks = [m.rank for m in members]
        pg = self._group(key, ranks)
        tensors = self._state_tensors()
        if pg is not None:
            for tensor in tensors:
                pg.broadcast(tensor, ranks.index(source)).wait()
        algo = self.trainer.algo
        algo.outer_step, self.trainer.step = int(tensors[0][0]), int(tensors[0][1])
        withheld = int(tensors[0][2])
        algo.withheld_at = None if withheld < 0 else withheld
        algo.withheld_scale = algo.outer_lr * algo.outer_momentum  # the same config on every worker


def set_step(trainer, step: int) -> None:
    """Move the step counter and the learning-rate schedule to `step`."""
    trainer.step = step
    sched = trainer.scheduler
    sched.last_epoch = step
    lrs = [base * fn(step) for base, fn in zip(sched.base_lrs, sched.lr_lambdas)]
    for group, lr in zip(trainer.optimizer.param_groups, lrs):
        group["lr"] = lr
    sched._last_lr = lrs


def from_env(rank: int, world: int, algorithm: str) -> Membership | None:
    """The membership for this worker when the backend asked for elastic DiLoCo."""
    store_path = os.environ.get(STORE_ENV)
    if not store_path or algorithm == "ddp":
        return None
    get = lambda name, default: float(os.environ.get(f"GEOTRAIN_ELASTIC_{name}", default))  # noqa: E731
    return Membership(rank, world, store_path, os.environ.get("GEOTRAIN_ELASTIC_GEN", "0"),
                      join_timeout=get("JOIN_TIMEOUT_S", 60), heartbeat_timeout=get("HEARTBEAT_TIMEOUT_S", 5),
                      op_timeout=get("OP_TIMEOUT_S", 30), datacenter=datacenter_from_env())


def datacenter_from_env() -> str:
    """GEOTRAIN_DATACENTER (else dc<GEOTRAIN_DC_INDEX>): a name of letters, digits, '.', '_' or '-' (it is written into the store's
    member lists, whose separators are ':' and ';'); empty when unset."""
    name = os.environ.get(DATACENTER_ENV, "")
    if not name and os.environ.get("GEOTRAIN_DC_INDEX", "").isdigit():  # a launcher's topology (recipes.topology)
        name = f"dc{int(os.environ['GEOTRAIN_DC_INDEX'])}"
    if name and not re.fullmatch(r"[A-Za-z0-9._-]{1,63}", name):
        raise SystemExit(f"{DATACENTER_ENV}={name[:80]!r} is not a datacenter name: use 1-63 letters, digits, '.', '_' or '-'")
    return name
