"""Shared by the datacenter-loss test and bench: elastic `recipes.train` workers in emulated datacenters
(recipes.bench.netns namespaces, or plain processes on loopback) meeting in a `python -m
recipes.elastic_store` server, as the watcher pod and the trainer pods do on Kubernetes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from recipes.bench import netns

ROOT = Path(__file__).resolve().parents[2]
HUB_ADDRESS = f"{netns.SUBNET}.254"  # the store's address on the hub's bridge
STORE_PORT = 29401
STEP = re.compile(r"\bstep (\d+)/\d+ loss")
FAST = {"GEOTRAIN_ELASTIC_JOIN_TIMEOUT_S": "30", "GEOTRAIN_ELASTIC_HEARTBEAT_TIMEOUT_S": "2",
        "GEOTRAIN_ELASTIC_OP_TIMEOUT_S": "15"}


def write_token(path: Path) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, os.urandom(32).hex().encode())
    os.close(fd)
    return path


@dataclass
class Cluster:
    """`dcs` x `per_dc` workers (rank = dc * per_dc + i) of one tiny elastic DiLoCo run."""

    folder: Path
    dcs: int = 2
    per_dc: int = 2
    steps: int = 160
    inner: int = 8
    seed: int = 0
    wan: netns.Wan | None = None  # None: every process on this host's loopback
    store: subprocess.Popen | None = None
    port: int = STORE_PORT
    workers: dict[int, subprocess.Popen] = field(default_factory=dict)
    starts: dict[int, int] = field(default_factory=dict)

    @property
    def world(self) -> int:
        return self.dcs * self.per_dc

    @property
    def out_dir(self) -> Path:
        return self.folder / "out"

    def _in(self, ns: str | None) -> list[str]:
        return ["ip", "netns", "exec", ns] if ns else []

    def start_store(self) -> None:
        token = write_token(self.folder / "store-token")
        host = "127.0.0.1"
        if self.wan is not None:
            netns.sh("ip", "-n", netns.HUB, "addr", "add", f"{HUB_ADDRESS}/24", "dev", "br0")
            host = HUB_ADDRESS
        self.store = subprocess.Popen(
            [*self._in(netns.HUB if self.wan else None), sys.executable, "-m", "recipes.elastic_store",
             "--host", host, "--port", str(0 if self.wan is None else self.port), "--token-file", str(token)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=open(self.folder / "store.log", "w"), text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        line = self.store.stdout.readline()
        if "serving on" not in line:
            raise RuntimeError(f"the store did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])
        self.url = f"geotrain-store://{host}:{self.port}"

    def start_worker(self, rank: int) -> subprocess.Popen:
        dc = rank // self.per_dc
        ns = self.wan.names[dc] if self.wan is not None else None
        env = {**os.environ, **FAST, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
               "WANDB_MODE": "disabled", "RANK": str(rank), "WORLD_SIZE": str(self.world),
               "LOCAL_RANK": str(rank % self.per_dc), "LOCAL_WORLD_SIZE": str(self.per_dc),
               "GEOTRAIN_ELASTIC_STORE": self.url, "GEOTRAIN_ELASTIC_GEN": "0",
               "GEOTRAIN_ELASTIC_STORE_TOKEN_FILE": str(self.folder / "store-token"),
               "GEOTRAIN_DATACENTER": f"dc{dc}", "GLOO_SOCKET_IFNAME": netns.IFACE if ns else "lo",
               # the topology a Kubernetes launcher also sets (recipes.topology): the elastic pool groups by it
               "GEOTRAIN_DC_INDEX": str(dc), "GEOTRAIN_DC_COUNT": str(self.dcs),
               "GEOTRAIN_DC_RANK": str(rank % self.per_dc), "GEOTRAIN_DC_SIZE": str(self.per_dc)}
        args = ["--config", str(ROOT / "recipes/configs/gpt-neo/tiny.yaml"), "gradient_compression=low",
                f"steps={self.steps}", f"diloco.inner_steps={self.inner}", f"seed={self.seed}", "device=cpu",
                f"out_dir={self.out_dir}", "logging.wandb=false", "logging.log_every=1", "checkpoint.every=0",
                "checkpoint.keep=2", "data.batch_size=8", "optim.warmup_steps=5", "logging.eval_batches=8"]
        self.starts[rank] = self.starts.get(rank, 0) + 1
        log = open(self.log_path(rank), "a")
        proc = subprocess.Popen([*self._in(ns), sys.executable, "-m", "recipes.train", *args], cwd=ROOT, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.workers[rank] = proc
        return proc

    def start(self) -> "Cluster":
        self.folder.mkdir(parents=True, exist_ok=True)
        self.start_store()
        for rank in range(self.world):
            self.start_worker(rank)
        return self

    def log_path(self, rank: int) -> Path:
        return self.folder / f"worker-{rank}.log"

    def events(self, rank: int, kind: str | None = None) -> list[dict]:
        out = []
        for line in self.log_path(rank).read_text(errors="replace").splitlines():
            if "geotrain-event " in line:
                try:
                    event = json.loads(line.split("geotrain-event ", 1)[1])
                except json.JSONDecodeError:
                    continue
                if kind is None or event.get("kind") == kind:
                    out.append(event)
        return out

    def last_step(self, rank: int) -> int:
        """The step of the newest progress line a worker printed (0 before the first)."""
        steps = STEP.findall(self.log_path(rank).read_text(errors="replace"))
        return int(steps[-1]) if steps else 0

    def set_link(self, dc: int, up: bool) -> None:
        """Cut or restore datacenter `dc`'s uplink (its veth's hub end)."""
        netns.sh("ip", "-n", netns.HUB, "link", "set", f"h{dc}", "up" if up else "down")

    def finals(self) -> list[torch.Tensor]:
        step_dir = self.out_dir / "checkpoints" / f"step_{self.steps:08d}"
        return [torch.load(step_dir / f"rank_{r}.pt", weights_only=True)["algorithm"]["global"]
                for r in range(self.world)]

    def result(self) -> dict:
        return json.loads((self.out_dir / "result.json").read_text())

    def stop(self) -> None:
        for proc in [*self.workers.values(), self.store]:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
