"""The workspace's watcher: a small process beside a Kubernetes workspace's Volcano job, so that
recovery does not depend on the user's laptop (issue 40).

    python -m recipes.watcher --namespace NS --job gt-ID --history gt-ID-history --max-recoveries 3

It runs in the cluster as a Deployment of one pod (core.kubernetes.watcher_manifests renders it,
with a ServiceAccount whose Role allows only what is called here). Every poll it reads the job
and its pods through the API and:
- a trainer pod that went Failed (or Unknown: its node stopped answering) is deleted, within the
  workspace's `max_recoveries`. Volcano (v1.11.0, pkg/controllers/job/job_controller_handler.go
  deletePod) turns the deletion into a PodEvicted request for that task and pod; the job's task
  policies map PodEvicted to RestartPod (state/running.go: KillTarget, RetryCount++), and
  syncJob (job_controller_actions.go) creates the pod again, same name, new uid. Only that pod
  restarts, never the job; the pods still running keep training.
- a pod that came back with a new uid ends its recovery once it trains again (its log shows the
  resume event or a step): the time paused, and the steps lost since the newest step any pod had
  logged when it was lost, are recorded.
- the history (recoveries with their cause, attempt and budget, time paused, the budget spent)
  is kept as JSON in the workspace's history ConfigMap, which `geotrain workspaces show` reads.
A restarted watcher reads the history back first, so the budget is never counted twice.

An elastic DiLoCo workspace's quorum store runs in this process (`--store-port`, `--store-token-file`:
recipes.elastic_store, HMAC-authenticated, behind its Service and NetworkPolicy); each poll its
view of the quorum (outer step, the datacenters present and their workers) goes into the state,
and a change of the datacenters present into the history (kind "quorum").

With `--notify-file` (the workspace's notify Secret, mounted optional) it POSTs COMPLETED, FAILED
(the job's phase) and RECOVERED (a recovery it wrote down) to the webhook there (recipes.watcher_notify);
each event once: those sent are kept in the state, so a restarted watcher does not send them again.

Standard library only (no kubernetes client in the image): in the pod it talks HTTPS to the
API server with the pod's service-account token and CA; `--api URL` points it elsewhere (tests).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # what kubelet mounts for the pod's token
HISTORY_KEY = "history.json"
STATE_KEY = "watcher.json"
MAX_HISTORY = 500  # entries kept: a ConfigMap holds at most 1 MiB
MAX_TEXT = 200
REQUEST_TIMEOUT_S = 30
STATE_EVERY_S = 30.0  # the state's heartbeat, written even when nothing happened
NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # DNS-1123 label: job, namespace, ConfigMap
LOST_PHASES = ("Failed", "Unknown")  # Unknown: the pod's node stopped reporting
ENDED_JOB_PHASES = ("Completed", "Failed", "Terminated", "Aborted")
# What the trainers print (recipes/telemetry.py say/emit): progress lines and the resume event.
PROGRESS = re.compile(r"\[rank \d+\] step (\d+)/\d+ loss ")
EVENT = "geotrain-event "
LOG_TAIL = "container=trainer&tailLines=400&limitBytes=262144"  # a bounded tail, as the backend reads
TRAINING_WAIT_S = 3600.0  # a replacement that shows no step by then is written down as running, steps unknown
# recovery.keep_failed_pods (core/kubernetes/failed_pods.py): a failed pod stays where it failed, for a look
KEEP_ANNOTATION = "geotrain.io/keep-failed-pods"
WORKSPACE_ANNOTATION = "geotrain.io/workspace-id"  # core.kubernetes.manifests: the id the user knows
MAX_NOTIFIED = 500


def _text(value: Any) -> str:
    """The API's words, one printable line, bounded (they reach terminals through the CLI)."""
    return "".join(c if c.isprintable() else " " for c in str(value))[:MAX_TEXT]


class Api:
    """The few API calls the watcher makes, over urllib."""

    def __init__(self, base: str, token_file: str | None = None, ca_file: str | None = None) -> None:
        self.base, self.token_file = base.rstrip("/"), token_file
        self.context = ssl.create_default_context(cafile=ca_file) if base.startswith("https:") else None

    @classmethod
    def in_cluster(cls) -> "Api":
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", f"{SA_DIR}/token", f"{SA_DIR}/ca.crt")

    def call(self, method: str, path: str, body: dict | None = None, raw: bool = False) -> tuple[int, Any]:
        """(HTTP status, the answer's JSON; with `raw` its bytes)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Accept": "application/json",
                                                  "Content-Type": "application/json"})
        if self.token_file:  # read each time: kubelet rotates projected tokens
            with open(self.token_file) as f:
                request.add_header("Authorization", "Bearer " + f.read().strip())
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S, context=self.context) as response:
                data = response.read(16 << 20)
                return response.status, data if raw else json.loads(data or b"{}")
        except urllib.error.HTTPError as exc:
            if raw:
                return exc.code, b""
            try:
                return exc.code, json.loads(exc.read(1 << 20) or b"{}")
            except ValueError:
                return exc.code, {}

    def checked(self, method: str, path: str, body: dict | None = None, missing_ok: bool = False) -> dict | None:
        status, answer = self.call(method, path, body)
        if status == 404 and missing_ok:
            return None
        if status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {status} {_text(answer.get('message', ''))}")
        return answer


class Watcher:
    """One workspace's pods, recoveries and history; `poll()` is one idempotent pass."""

    def __init__(self, api: Api, namespace: str, job: str, history: str, budget: int, quorum=None,
                 notify_file: str | None = None) -> None:
        """`quorum`: the store's quorum_view (recipes.elastic_store.StoreServer), None without a store;
        `notify_file`: the webhook's address, a Secret's file (recipes.watcher_notify)."""
        self.api, self.namespace, self.job, self.history_name, self.budget = api, namespace, job, history, budget
        self.quorum, self.notify_file = quorum, notify_file
        self.workspace = job.removeprefix("gt-")
        self.notified: list[str] = []  # the events already sent (or passed over with no address), by key
        self.present: list[str] | None = None  # the datacenters in the last quorum written down
        self.core = f"/api/v1/namespaces/{namespace}"
        self.history: list[dict] = []
        self.handled: set[str] = set()  # uids of lost pods already acted on
        # pod name -> (lost uid, when it was lost, the newest step any pod had logged then, or None)
        self.waiting: dict[str, tuple[str, float, int | None]] = {}
        self.known: dict[str, str] = {}  # pod name -> uid last seen
        self.state: dict[str, Any] = {}
        self.written_at = 0.0
        self.keep = False
        self._load()

    # history ------------------------------------------------------------------------------
    def _config_map(self) -> dict:
        found = self.api.checked("GET", f"{self.core}/configmaps/{self.history_name}")
        return found or {}

    def _load(self) -> None:
        data = self._config_map().get("data") or {}
        try:
            entries = json.loads(data.get(HISTORY_KEY) or "[]")
            state = json.loads(data.get(STATE_KEY) or "{}")
        except ValueError:
            entries, state = [], {}
        self.history = [e for e in entries if isinstance(e, dict)][-MAX_HISTORY:] if isinstance(entries, list) else []
        self.handled = {str(e["uid"]) for e in self.history if e.get("kind") == "recovery" and e.get("uid")}
        waiting = state.get("waiting") if isinstance(state, dict) else None
        for name, entry in (waiting or {}).items() if isinstance(waiting, dict) else ():
            uid, at, reached = (list(entry) + [None])[:3]
            self.waiting[str(name)] = (str(uid), float(at), int(reached) if isinstance(reached, int) else None)
        known = state.get("known") if isinstance(state, dict) else None
        self.known = {str(k): str(v) for k, v in known.items()} if isinstance(known, dict) else {}
        quorum = state.get("quorum") if isinstance(state, dict) else None
        if isinstance(quorum, dict) and isinstance(quorum.get("datacenters"), dict):
            self.present = sorted(str(dc) for dc in quorum["datacenters"])
        notified = state.get("notified") if isinstance(state, dict) else None
        self.notified = [str(k) for k in notified][-MAX_NOTIFIED:] if isinstance(notified, list) else []

    @property
    def used(self) -> int:
        return sum(e.get("kind") == "recovery" for e in self.history)

    def _record(self, kind: str, **detail: Any) -> None:
        self.history.append({"at": time.time(), "kind": kind, "source": "watcher", **detail})
        # over the bound, the oldest entries other than recoveries go first: the budget is counted from these
        drop = {id(e) for e in [e for e in self.history if e.get("kind") != "recovery"][:max(0, len(self.history) - MAX_HISTORY)]}
        self.history = [e for e in self.history if id(e) not in drop][-MAX_HISTORY:]
        self.written_at = 0.0  # write now

    def _write(self, now: float) -> None:
        if now - self.written_at < STATE_EVERY_S:
            return
        current = self._config_map()
        current["data"] = {HISTORY_KEY: json.dumps(self.history),
                           STATE_KEY: json.dumps({**self.state, "updated_at": now, "used": self.used,
                                                  "budget": self.budget,
                                                  "waiting": {n: list(v) for n, v in self.waiting.items()},
                                                  "known": self.known, "notified": self.notified})}
        self.api.checked("PUT", f"{self.core}/configmaps/{self.history_name}", current)  # resourceVersion kept
        self.written_at = now

    # one pass --------------------------------------------------------------------------------
    def poll(self) -> bool:
        """Act on the job's pods once; False when the job has ended (nothing to act on)."""
        now = time.time()
        job = self.api.checked("GET", f"/apis/batch.volcano.sh/v1alpha1/namespaces/{self.namespace}"
                                      f"/jobs/{self.job}", missing_ok=True)
        if job is None:
            return True  # not made yet (the watcher is created first), or deleted: the Deployment goes with it
        phase = str(((job.get("status") or {}).get("state") or {}).get("phase") or "Pending")
        annotations = (job.get("metadata") or {}).get("annotations") or {}
        self.keep = annotations.get(KEEP_ANNOTATION) == "true"
        self.workspace = _text(annotations.get(WORKSPACE_ANNOTATION) or self.workspace)[:64]
        selector = urllib.parse.quote(f"volcano.sh/job-name={self.job}")
        pods = (self.api.checked("GET", f"{self.core}/pods?labelSelector={selector}") or {}).get("items") or []
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
            self._pod(pod, now)
        self.state = {"job_phase": _text(phase), "pods": len(pods),
                      "running": sum((p.get("status") or {}).get("phase") == "Running" for p in pods)}
        if self.quorum is not None:
            self._quorum()
        if phase in ENDED_JOB_PHASES:
            event = "COMPLETED" if phase == "Completed" else "FAILED"
            self._notify(event, event, f"the Volcano job ended {_text(phase)}")
        self._write(now)
        return phase not in ENDED_JOB_PHASES

    def _notify(self, key: str, event: str, detail: str) -> None:
        """Send the event once (its key kept in the state, written at the end of this poll)."""
        if key in self.notified:
            return
        from recipes.watcher_notify import send

        send(self.notify_file, self.workspace, event, detail, lambda line: print(line, file=sys.stderr, flush=True))
        self.notified = [*self.notified, key][-MAX_NOTIFIED:]
        self.written_at = 0.0

    def _quorum(self) -> None:
        """The store's view: the newest quorum's outer step and its members by datacenter. A change of
        the datacenters present (one lost, one back) is written down as it is seen."""
        view = self.quorum()
        by_dc = {_text(dc)[:64]: len(ranks) for dc, ranks in sorted((view.get("datacenters") or {}).items())[:64]}
        step = view.get("outer_step")
        self.state["quorum"] = {"outer_step": step if isinstance(step, int) else None, "datacenters": by_dc,
                                "workers": len(view.get("members") or []),
                                "generation": _text(view.get("generation") or "")[:64]}
        present = sorted(by_dc)
        if by_dc and present != self.present:
            left = [dc for dc in self.present or [] if dc not in present]
            self._record("quorum", datacenters=present, left=left, outer_step=self.state["quorum"]["outer_step"],
                         workers=self.state["quorum"]["workers"])
            self.present = present

    def _label(self, name: str) -> str:
        return name.removeprefix(self.job + "-")

    def _pod(self, pod: dict, now: float) -> None:
        name, uid = pod["metadata"]["name"], str(pod["metadata"].get("uid", ""))
        phase = (pod.get("status") or {}).get("phase", "Pending")
        before = self.known.get(name)
        self.known[name] = uid
        if before and before != uid and before not in self.handled and name not in self.waiting:
            # replaced without us (Volcano acted on an eviction): a recovery all the same
            self.handled.add(before)
            self._record("recovery", scope="pod", workers=[self._label(name)], uid=before,
                         cause=f"pod {self._label(name)} was replaced (evicted or deleted)",
                         attempt=self.used + 1, budget=self.budget)
            self.waiting[name] = (before, now, self._reached())
        if phase in LOST_PHASES and uid not in self.handled:
            self._lost(pod, name, uid, now)
        elif phase == "Running" and name in self.waiting and self.waiting[name][0] != uid:
            self._training_again(name, now)

    def _log(self, name: str) -> list[str]:
        """A pod's recent lines (empty when its log cannot be read: not started, gone)."""
        status, answer = self.api.call("GET", f"{self.core}/pods/{name}/log?{LOG_TAIL}", raw=True)
        return answer.decode("utf-8", "replace").splitlines() if status == 200 else []

    def _reached(self) -> int | None:
        """The newest step any of the job's pods has logged (progress lines), None when none has."""
        steps = [int(m.group(1)) for name in sorted(self.known) for line in self._log(name)
                 if (m := PROGRESS.search(line))]
        return max(steps) if steps else None

    def _training_again(self, name: str, now: float) -> None:
        """The replacement runs: written down once it trains again (it resumed from a checkpoint, or
        logged a step), with the steps lost since the newest step seen when its pod was lost."""
        _, since, reached = self.waiting[name]
        resumed, progressed = None, False
        for line in self._log(name):
            if line.startswith(EVENT):
                try:
                    event = json.loads(line[len(EVENT):])
                except ValueError:
                    continue
                if isinstance(event, dict) and event.get("kind") == "resumed" and isinstance(event.get("step"), int):
                    resumed = event["step"]
            progressed = progressed or bool(PROGRESS.search(line))
        if resumed is None and not progressed and now - since < TRAINING_WAIT_S:
            return  # not training yet: looked at again next poll
        lost_uid = self.waiting.pop(name)[0]
        step = resumed if resumed is not None else (0 if progressed else None)
        lost = max(0, reached - step) if reached is not None and step is not None else None
        self._record("recovered", worker=self._label(name), downtime_s=round(now - since, 3), step=step,
                     steps_lost=lost)
        self._notify(f"RECOVERED {lost_uid}", "RECOVERED",
                     f"{self._label(name)} training again at step {step} after {round(now - since, 1)}s "
                     f"({lost} steps lost)")

    def _lost(self, pod: dict, name: str, uid: str, now: float) -> None:
        cause = f"pod {self._label(name)} {failure(pod)}"
        self.handled.add(uid)
        if self.keep:
            self._record("kept", cause=cause, uid=uid)
            return
        if self.used >= self.budget:
            self._record("gave_up", cause=cause, budget=self.budget, uid=uid)
            return
        self._record("recovery", scope="pod", workers=[self._label(name)], cause=cause, uid=uid,
                     attempt=self.used + 1, budget=self.budget)
        self.waiting[name] = (uid, now, self._reached())
        self._write(now)  # the count is kept before acting: a watcher restarted now does not act twice
        self.api.checked("DELETE", f"{self.core}/pods/{name}", {"kind": "DeleteOptions", "apiVersion": "v1",
                                                                 "preconditions": {"uid": uid}}, missing_ok=True)


def failure(pod: dict) -> str:
    """Why a pod is lost, in the API's words: the container's end, the eviction, the node."""
    status = pod.get("status") or {}
    if status.get("phase") == "Unknown":
        return "lost its node (phase Unknown)"
    for container in status.get("containerStatuses") or []:
        ended = (container.get("state") or {}).get("terminated")
        if ended:
            reason = ended.get("reason") or "Error"
            return _text(f"failed: {reason}, exit code {ended.get('exitCode')}")
    reason = status.get("reason") or "Failed"
    return _text(f"failed: {reason}" + (f" ({status['message']})" if status.get("message") else ""))


def _name(value: str) -> str:
    if len(value) > 63 or not NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a Kubernetes name (a DNS-1123 label)")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", type=_name, required=True)
    parser.add_argument("--job", type=_name, required=True)
    parser.add_argument("--history", type=_name, required=True, help="the history ConfigMap's name")
    parser.add_argument("--max-recoveries", type=int, required=True)
    parser.add_argument("--poll-s", type=float, default=5.0)
    parser.add_argument("--api", help="the API server's URL (default: in the cluster, from the pod)")
    parser.add_argument("--store-port", type=int, help="serve the elastic quorum store on this port")
    parser.add_argument("--store-token-file", help="the store's token (a Secret's file; never on the command line)")
    parser.add_argument("--store-host", default="0.0.0.0", help="the address the store listens on")
    parser.add_argument("--notify-file", help="the webhook's address, a Secret's file (absent: no notifications)")
    args = parser.parse_args(argv)
    if args.max_recoveries < 0 or not 0.05 <= args.poll_s <= 3600:
        parser.error("--max-recoveries must be >= 0 and --poll-s between 0.05 and 3600")
    if (args.store_port is None) != (args.store_token_file is None) or not 0 <= (args.store_port or 0) < 65536:
        parser.error("--store-port (0-65535) and --store-token-file go together")
    quorum = None
    if args.store_port is not None:
        from recipes.elastic_store import StoreServer, read_token

        store = StoreServer(args.store_host, args.store_port, read_token(args.store_token_file)).start()
        quorum = store.quorum_view
        print(f"geotrain watcher: elastic store on {args.store_host}:{store.port}", flush=True)
    api = Api(args.api) if args.api else Api.in_cluster()
    watcher = Watcher(api, args.namespace, args.job, args.history, args.max_recoveries, quorum, args.notify_file)
    print(f"geotrain watcher: job {args.job} in {args.namespace}, {watcher.used} of "
          f"{args.max_recoveries} recoveries used", flush=True)
    active = True
    while True:  # never exits by itself: a Deployment would start it again (deleted with the workspace)
        try:
            was, active = active, watcher.poll()
            if was and not active:
                print("geotrain watcher: the job has ended; polling slowly", flush=True)
        except (OSError, RuntimeError, ValueError, KeyError) as exc:  # the API away for a moment: next poll
            print(f"geotrain watcher: {_text(exc)}", file=sys.stderr, flush=True)
        time.sleep(args.poll_s if active else max(args.poll_s, 60.0))


if __name__ == "__main__":
    sys.exit(main())
