"""The workspace watcher's footprint and reaction time, against the stand-in API server
(tests/kubernetes/fake_api_server.py: no real one runs here, so the pod's scheduling, image start
and rendezvous are not in these figures). Prints; asserts nothing.

    python -m tests.kubernetes.bench_watcher [--pods 8] [--failures 5] [--poll-s 0.5] [--store]

For each failure: a trainer pod marked Failed -> the watcher deletes it (the stand-in, playing
Volcano's syncJob, makes it again) -> 'recovery' written; then the new pod runs and logs its resume
event -> 'recovered'.
Also the watcher process's resident memory and CPU seconds per poll. With --store the watcher also
serves the elastic quorum store (as for a DiLoCo workspace) while one client per pod heartbeats into it
every 0.5 s and an outer step's quorum is written every second (what recipes.elastic writes there,
written here directly: no torch training runs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import tempfile
import threading
from datetime import timedelta
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.faults.faults import wait_for
from tests.kubernetes.fake_api_server import FakeKubeAPI

REPO = Path(__file__).resolve().parents[2]
JOB, NS, HISTORY = "gt-bench", "default", "gt-bench-history"


def _history(fake: FakeKubeAPI) -> list[dict]:
    return json.loads(fake.objects[("configmaps", NS, HISTORY)]["data"]["history.json"])


def _until(check):
    """Polled every 5 ms: the figures are the watcher's reaction times, not the poll's."""
    return wait_for(check, 60, "the watcher to act", poll=0.005)


def _trainers(port: int, token: bytes, pods: int, stop: threading.Event) -> None:
    """One client per pod heartbeating, and rank 0 writing each outer step's quorum (the pool's keys)."""
    from recipes.elastic_store_client import NetworkStore

    stores = [NetworkStore("127.0.0.1", port, token, timedelta(seconds=30)) for _ in range(pods)]
    step = 0
    while not stop.wait(0.5):
        for rank, store in enumerate(stores):
            store.add(f"gen0/hb/{rank}", 1)
        if stop.wait(0.5):
            break
        step += 1
        members = "".join(f"{r}:live:-1:dc{r % 2};" for r in range(pods)).encode()
        stores[0].set(f"gen0/q/{step}/0/members", members)
        stores[0].set("gen0/outer/current", str(step).encode())
    for store in stores:
        store.close()


def run(pods: int, failures: int, poll_s: float, store: bool = False) -> None:
    fake = FakeKubeAPI()
    url = fake.start()
    fake.replace_deleted_pods = True
    fake.objects[("jobs", NS, JOB)] = {"metadata": {"name": JOB, "uid": "j", "annotations": {}},
                                       "spec": {}, "status": {"state": {"phase": "Running"}}}
    fake.objects[("configmaps", NS, HISTORY)] = {"metadata": {"name": HISTORY, "resourceVersion": "1", "uid": "c"},
                                                 "data": {"history.json": "[]", "watcher.json": "{}"}}
    names = [fake.add_pod(JOB, "worker", i) for i in range(pods)]
    folder = tempfile.mkdtemp()
    token = secrets.token_hex(32).encode()
    extra = []
    if store:
        fd = os.open(os.path.join(folder, "token"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        os.write(fd, token)
        os.close(fd)
        extra = ["--store-port", "0", "--store-host", "127.0.0.1", "--store-token-file", os.path.join(folder, "token")]
    watcher = subprocess.Popen([sys.executable, "-m", "recipes.watcher", "--namespace", NS, "--job", JOB,
                                "--history", HISTORY, "--max-recoveries", str(failures), "--poll-s", str(poll_s),
                                "--api", url, *extra], cwd=REPO, stdout=subprocess.PIPE, text=True)
    proc = psutil.Process(watcher.pid)
    stop = threading.Event()
    try:
        if store:
            port = int(re.search(r"elastic store on [^:]+:(\d+)", watcher.stdout.readline()).group(1))
            threading.Thread(target=_trainers, args=(port, token, pods, stop), daemon=True).start()
        threading.Thread(target=watcher.stdout.read, daemon=True).start()  # the rest of its output, unread
        _until(lambda: json.loads(fake.objects[("configmaps", NS, HISTORY)]["data"]["watcher.json"]).get("running"))
        noticed, running_again = [], []
        for i in range(failures):
            name = names[i % pods]
            old = fake.objects[("pods", NS, name)]["metadata"]["uid"]
            start = time.monotonic()
            fake.end_container(name, 137, reason="Error")
            _until(lambda: sum(e["kind"] == "recovery" for e in _history(fake)) == i + 1)
            noticed.append(time.monotonic() - start)
            _until(lambda: fake.objects.get(("pods", NS, name), {}).get("metadata", {}).get("uid") not in (None, old))
            fake.start_container(name)
            fake.write_log(name, b'geotrain-event {"kind": "resumed", "rank": 0, "step": 0}\n')  # training again
            _until(lambda: sum(e["kind"] == "recovered" for e in _history(fake)) == i + 1)
            running_again.append(time.monotonic() - start)
        cpu = proc.cpu_times()
        polls = sum(1 for m, p, _ in fake.requests if m == "GET" and p.endswith(f"/jobs/{JOB}"))
        rss = proc.memory_info().rss
        quorum = json.loads(fake.objects[("configmaps", NS, HISTORY)]["data"]["watcher.json"]).get("quorum")
    finally:
        stop.set()
        watcher.terminate()
        watcher.wait(30)
        fake.stop()
    print(f"watcher against the stand-in API server: {pods} pods, {failures} failures, poll every {poll_s:g} s")
    print(f"  pod Failed -> deleted and 'recovery' written: median {statistics.median(noticed):.2f} s "
          f"(max {max(noticed):.2f} s)")
    print(f"  pod Failed -> replacement running, 'recovered' written: median {statistics.median(running_again):.2f} s "
          f"(the stand-in starts it at once)")
    limit = "512 MiB, with the store" if store else "128 MiB"
    if store:
        print(f"  serving the elastic store to {pods} clients (heartbeats every 0.5 s, a quorum every 1 s); "
              f"its last view written: {quorum}")
    print(f"  resident memory {rss / 2**20:.1f} MiB (the pod's limit: {limit}); CPU {cpu.user + cpu.system:.2f} s "
          f"over {polls} polls ({1000 * (cpu.user + cpu.system) / max(polls, 1):.1f} ms per poll, start-up included)")
    print(f"  history: {[e['kind'] for e in _history(fake)]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--failures", type=int, default=5)
    parser.add_argument("--poll-s", type=float, default=0.5)
    parser.add_argument("--store", action="store_true", help="also serve the elastic store, under load")
    args = parser.parse_args(argv)
    run(args.pods, args.failures, args.poll_s, args.store)
    return 0


if __name__ == "__main__":
    sys.exit(main())
