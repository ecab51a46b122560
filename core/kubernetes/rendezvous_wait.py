"""The bounded wait a pod makes before it starts training (core.kubernetes.manifests renders it into
the pod's shell): for torchrun's rendezvous, or in elastic mode for the watcher's quorum store."""

from __future__ import annotations

from core.kubernetes import recipes_delivery as delivery

# Before torchrun starts, a pod waits (bounded by the join timeout) for what its torchrun
# needs first. The master: its own DNS name (its agent connects to the store it hosts by that
# name). A worker: the rendezvous endpoint itself, a TCP connect to master:port. The name
# resolves as soon as the master pod has an IP (the svc plugin publishes not-ready
# addresses), long before a far-away image pull ends; a worker that started torchrun then
# would spend the store's read_timeout and crash-loop (volcano#3753, issue 17.6).
WAIT_FOR_RDZV = delivery.FIND_PYTHON + """\
"$py" - <<'GEOTRAIN_WAIT' || exit 1
import json, os, socket, sys, time
host, port = os.environ["GEOTRAIN_RDZV_HOST"], int(os.environ["GEOTRAIN_RDZV_PORT"])
wait_s, connect = float(os.environ["GEOTRAIN_RDZV_WAIT_S"]), os.environ["GEOTRAIN_RDZV_IS_HOST"] != "1"
who = os.environ.get("GEOTRAIN_RDZV_WHO", "the master pod")  # elastic: the watcher (its quorum store)
deadline, resolved, said = time.monotonic() + wait_s, False, False
while True:
    try:
        socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
        resolved = True
        if connect:
            socket.create_connection((host, port), timeout=5).close()
        sys.exit(0)
    except OSError:
        pass
    if time.monotonic() >= deadline:
        why = (f"nothing listened at {host}:{port} within {wait_s:.0f}s: {who} did not start "
               "(image pull, crash, or pending)") if resolved else (
               f"{host} did not resolve within {wait_s:.0f}s: no headless Service (is Volcano's svc plugin on?)")
        print("geotrain: " + why, file=sys.stderr, flush=True)
        sys.exit(1)
    if connect and resolved and not said:
        print(f"geotrain: waiting for the rendezvous at {host}:{port} ({who} is not up yet)", flush=True)
        print("geotrain-event " + json.dumps({"kind": "rendezvous", "stage": "waiting", "at": time.time(),
              "missing": ["master"], "endpoint": f"{host}:{port}"}), flush=True)
        said = True
    time.sleep(2)
GEOTRAIN_WAIT
exec """
