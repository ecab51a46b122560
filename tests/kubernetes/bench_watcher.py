"""The workspace watcher's footprint and reaction time, against the stand-in API server
(tests/kubernetes/fake_api_server.py: no real one runs here, so the pod's scheduling, image start
and rendezvous are not in these figures). Prints; asserts nothing.

    python -m tests.kubernetes.bench_watcher [--pods 8] [--failures 5] [--poll-s 0.5]

For each failure: a trainer pod marked Failed -> the watcher deletes it (the stand-in, playing
Volcano's syncJob, makes it again) -> 'recovery' written; then the new pod runs and logs its resume
event -> 'recovered'.
Also the watcher process's resident memory and CPU seconds per poll.
"""

from __future__ import annotations

import argparse
import json
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


def run(pods: int, failures: int, poll_s: float) -> None:
    fake = FakeKubeAPI()
    url = fake.start()
    fake.replace_deleted_pods = True
    fake.objects[("jobs", NS, JOB)] = {"metadata": {"name": JOB, "uid": "j", "annotations": {}},
                                       "spec": {}, "status": {"state": {"phase": "Running"}}}
    fake.objects[("configmaps", NS, HISTORY)] = {"metadata": {"name": HISTORY, "resourceVersion": "1", "uid": "c"},
                                                 "data": {"history.json": "[]", "watcher.json": "{}"}}
    names = [fake.add_pod(JOB, "worker", i) for i in range(pods)]
    watcher = subprocess.Popen([sys.executable, "-m", "recipes.watcher", "--namespace", NS, "--job", JOB,
                                "--history", HISTORY, "--max-recoveries", str(failures), "--poll-s", str(poll_s),
                                "--api", url], cwd=REPO, stdout=subprocess.DEVNULL)
    proc = psutil.Process(watcher.pid)
    try:
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
    finally:
        watcher.terminate()
        watcher.wait(30)
        fake.stop()
    print(f"watcher against the stand-in API server: {pods} pods, {failures} failures, poll every {poll_s:g} s")
    print(f"  pod Failed -> deleted and 'recovery' written: median {statistics.median(noticed):.2f} s "
          f"(max {max(noticed):.2f} s)")
    print(f"  pod Failed -> replacement running, 'recovered' written: median {statistics.median(running_again):.2f} s "
          f"(the stand-in starts it at once)")
    print(f"  resident memory {rss / 2**20:.1f} MiB (the pod's limit: 128 MiB); CPU {cpu.user + cpu.system:.2f} s "
          f"over {polls} polls ({1000 * (cpu.user + cpu.system) / max(polls, 1):.1f} ms per poll, start-up included)")
    print(f"  history: {[e['kind'] for e in _history(fake)]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--failures", type=int, default=5)
    parser.add_argument("--poll-s", type=float, default=0.5)
    args = parser.parse_args(argv)
    run(args.pods, args.failures, args.poll_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
