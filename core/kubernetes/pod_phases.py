"""What each pod of a workspace is doing before it trains: pulling its image (from the
pod's container state and kubelet's events), preparing data or waiting for its peers
(from the recipes' event lines in its log), or running. Pure functions over the API's
JSON, so the rules are tested without a cluster.

Kubelet reports an image pull as events on the pod: `Pulling` ("Pulling image "x"") when
it starts, `Pulled` when done, `Failed`/`BackOff` when it cannot; the container meanwhile
waits with reason ContainerCreating, then ErrImagePull / ImagePullBackOff when stuck.

Before the trainer starts, kubelet runs the pod's init containers one after another and
reports each in `status.initContainerStatuses` (the trainer waits as PodInitializing, the pod
stays Pending); one that exits non-zero is run again with a back-off under restartPolicy
OnFailure (waiting: CrashLoopBackOff, lastState: terminated). Kubernetes docs, "Init
Containers" (https://kubernetes.io/docs/concepts/workloads/pods/init-containers/) and "Debug
Init Containers" (https://kubernetes.io/docs/tasks/debug/debug-application/debug-init-containers/).
"""

from __future__ import annotations

import calendar
import time
from typing import Any

from core.domain.records import Status
from core.domain.run_events import WorkerPhase, one_line
from core.kubernetes.pod_logs import container_status

MAX_DETAIL = 300  # characters of a pod's, the kubelet's or the scheduler's own words per worker or job
PULL_STUCK = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
STARTING = {"ContainerCreating", "PodInitializing"}
POD_PHASES = {"Pending": Status.PENDING, "Running": Status.RUNNING,
              "Succeeded": Status.COMPLETED, "Failed": Status.FAILED}
JOB_PHASES = {  # a Volcano Job's status.state.phase
    "Pending": Status.PENDING, "Inqueue": Status.PENDING,
    "Running": Status.RUNNING, "Restarting": Status.RUNNING, "Completing": Status.RUNNING,
    "Aborting": Status.RUNNING, "Terminating": Status.RUNNING,
    "Completed": Status.COMPLETED,
    "Aborted": Status.FAILED, "Terminated": Status.FAILED, "Failed": Status.FAILED,
}
_LIFECYCLE = {"Pulling": 0, "Pulled": 2}
PULL_HINT = "check the image name (--image) and that the node can reach its registry"
# containerd's words when an image index has no manifest for the node's platform (containerd
# images/image.go: "no match for platform in manifest"; Docker's registry client: "no matching
# manifest for linux/arm64/v8 in the manifest list entries").
WRONG_ARCH = ("no match for platform", "no matching manifest for")
ARCH_HINT = "the image has no build for this node's CPU architecture: deploy with --image, one built for it"
INIT_STEPS = {"install-deps": "installing dependencies", "cache-owner": "preparing the node's cache directories"}
INIT_TAIL_LINES = 5  # of a failing init step's output, on its worker's row


def events_by_pod(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The namespace's events grouped by the pod they are about, oldest first."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        target = event.get("involvedObject") or {}
        if target.get("kind") == "Pod" and target.get("name"):
            grouped.setdefault(target["name"], []).append(event)
    for items in grouped.values():  # timestamps have whole seconds: in a tie, a pull ends after it starts
        items.sort(key=lambda e: (_event_time(e), _LIFECYCLE.get(e.get("reason"), 1)))
    return grouped


def _event_time(event: dict[str, Any]) -> float:
    stamp = event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or ""
    try:
        return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, TypeError):
        return 0.0


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def pull_phase(pod: dict[str, Any], events: list[dict[str, Any]], now: float) -> tuple[str, str] | None:
    """(PULLING, detail) while the pod's node pulls its image or is stuck at it; else None."""
    node = (pod.get("spec") or {}).get("nodeName") or "its node"
    waiting = (container_status(pod).get("state") or {}).get("waiting") or {}
    waiting = next((w for w in (((s.get("state") or {}).get("waiting") or {}) for s in init_statuses(pod))
                    if w.get("reason") in PULL_STUCK), waiting)  # an init step's image, the same image
    reason = waiting.get("reason") or ""
    if reason in PULL_STUCK:
        message = waiting.get("message") or next(
            (e.get("message") for e in reversed(events) if e.get("reason") in ("Failed", "BackOff")), "")
        said = f": {one_line(message)[:MAX_DETAIL]}" if message else ""  # the hint after it stays whole
        hint = ARCH_HINT if any(w in message for w in WRONG_ARCH) else PULL_HINT
        return Status.PULLING.value, one_line(f"stuck: {reason} on {node}{said} — {hint}")
    if reason not in STARTING and (pod.get("status") or {}).get("phase") != "Pending":
        return None
    pulls = [e for e in events if e.get("reason") in ("Pulling", "Pulled")]
    if not pulls or pulls[-1].get("reason") != "Pulling":
        return None
    started = _event_time(pulls[-1])
    took = f" for {_duration(now - started)}" if started else ""
    image = (pulls[-1].get("message") or "").removeprefix("Pulling image ").strip('"') or "the image"
    return Status.PULLING.value, one_line(f"pulling {image[:MAX_DETAIL]} on {node}{took}")


def init_statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return (pod.get("status") or {}).get("initContainerStatuses") or []


def _init_failed(status: dict[str, Any]) -> dict[str, Any]:
    """The terminated state of an init container's last run when that run failed, else {}."""
    state = status.get("state") or {}
    if "running" in state:
        return {}
    terminated = state.get("terminated") or (status.get("lastState") or {}).get("terminated") or {}
    return terminated if terminated.get("exitCode") not in (None, 0) else {}


def current_init(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The init container the pod is at (the first whose run has not ended with exit code 0),
    or None when there are none or all are done."""
    for status in init_statuses(pod):
        terminated = (status.get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode") != 0:
            return status
    return None


def init_log_wanted(pod: dict[str, Any]) -> tuple[str, bool] | None:
    """(container, previous) of a failed init step whose output must be read from its log: kubelet
    keeps none in the termination message (an older manifest without FallbackToLogsOnError)."""
    status = current_init(pod)
    if status is None or not _init_failed(status) or _init_failed(status).get("message"):
        return None
    return status.get("name", ""), "terminated" not in (status.get("state") or {})


def init_phase(pod: dict[str, Any], log_lines: list[str] | None = None) -> tuple[str, str] | None:
    """(INSTALLING_DEPS, detail) while an init step runs or fails, with the failing step's last
    lines (its termination message, which FallbackToLogsOnError fills from the log's tail, or
    `log_lines`); None once the init steps are done or when the pod has none."""
    status = current_init(pod)
    if status is None or (pod.get("status") or {}).get("phase") not in (None, "Pending", "Failed"):
        return None
    name = str(status.get("name") or "init")
    node = (pod.get("spec") or {}).get("nodeName") or "its node"
    statuses = init_statuses(pod)
    step = f"{INIT_STEPS.get(name, name)} on {node} (init {statuses.index(status) + 1}/{len(statuses)})"
    failed = _init_failed(status)
    if not failed:
        return Status.INSTALLING_DEPS.value, one_line(step)
    restarts = int(status.get("restartCount") or 0)
    lines = (failed.get("message") or "").splitlines() or list(log_lines or [])
    tail = " | ".join(one_line(line).strip() for line in lines[-INIT_TAIL_LINES:] if line.strip())
    how = _stopped({key: value for key, value in failed.items() if key != "message"})
    said = f"{name} failed ({how}{f'; restarts: {restarts}' if restarts else ''}) — {step}"
    return Status.INSTALLING_DEPS.value, one_line(f"{said}: {tail[-MAX_DETAIL:]}" if tail else said)


def pod_phase(pod: dict[str, Any], events: list[dict[str, Any]], log_lines: list[str] | None,
              now: float, init_lines: list[str] | None = None) -> tuple[str, str]:
    """One pod's (status, detail): PULLING, INSTALLING_DEPS, PREPARING_DATA, RENDEZVOUS, RUNNING,
    or its phase. `init_lines`: the tail of a failed init step's log (init_log_wanted)."""
    pulling = pull_phase(pod, events, now)
    if pulling is not None:
        return pulling
    installing = init_phase(pod, init_lines)
    if installing is not None and (pod.get("status") or {}).get("phase") != "Failed":
        return installing
    phase = POD_PHASES.get((pod.get("status") or {}).get("phase", "Pending"), Status.PENDING)
    if phase is Status.FAILED:  # a pod a job restart stops is not the failure: the job's phase says it
        return (Status.PENDING.value, "stopped by a job restart") if being_deleted(pod) else (phase.value, failure(pod))
    if phase is not Status.RUNNING or log_lines is None:
        return phase.value, ""
    follow = WorkerPhase()
    for line in log_lines:
        follow.feed(line)
    if follow.status == Status.PENDING.value:  # started, silent: torchrun's own rendezvous
        return Status.RENDEZVOUS.value, "started, no training step yet"
    return follow.status, one_line(follow.detail)[:MAX_DETAIL]


def _stopped(terminated: dict[str, Any], unnamed: str = "") -> str:
    """A container's terminated state in words: "OOMKilled, exit code 137: <its message>"."""
    code = terminated.get("exitCode")
    said = ", ".join(part for part in (terminated.get("reason") or unnamed,
                                       f"exit code {code}" if code is not None else "") if part)
    message = terminated.get("message") or ""
    return f"{said}: {message}" if said and message else said or message


def failure(pod: dict[str, Any]) -> str:
    """Why a Failed pod failed, on one bounded line: the pod's own reason first (an eviction, a
    deadline), then how its container stopped: "Evicted: The node was low on resource: memory.
    (ContainerStatusUnknown, exit code 137)", "OOMKilled, exit code 137", "Failed, exit code 1"."""
    status = pod.get("status") or {}
    own = ": ".join(part for part in (status.get("reason"), status.get("message")) if part)
    terminated = (container_status(pod).get("state") or {}).get("terminated") or {}
    container = _stopped(terminated, "" if own else "Failed")
    init = current_init(pod)
    if not terminated and init is not None and _init_failed(init):  # the trainer never started
        container = f"init step {init.get('name')}: {_stopped(_init_failed(init))}"
    text = f"{own} ({container})" if own and container else own or container or "Failed"
    return one_line(text)[:MAX_DETAIL]


def last_restart(pod: dict[str, Any]) -> str:
    """How the container that kubelet restarted in place (restartPolicy OnFailure: a crash or an
    OOM kill leaves the pod Running) stopped last time, or ""."""
    terminated = (container_status(pod).get("lastState") or {}).get("terminated") or {}
    return one_line(_stopped(terminated))[:MAX_DETAIL]


def being_deleted(pod: dict[str, Any]) -> bool:
    """Deleted and going: a job restart (Volcano's RestartJob, the recovery check) stops every pod."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def first_failures(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Failed pods, the first to fail first (by when their container stopped; unknown last),
    leaving out those a restart already under way is stopping (they fail after it)."""
    def finished(pod: dict[str, Any]) -> str:  # RFC 3339 times sort as text
        terminated = (container_status(pod).get("state") or {}).get("terminated") or {}
        return str(terminated.get("finishedAt") or "~")
    return sorted((p for p in pods if (p.get("status") or {}).get("phase") == "Failed" and not being_deleted(p)),
                  key=finished)


def worker_detail(pod: dict[str, Any], phase_detail: str = "") -> str:
    """A worker row's words: `phase_detail` (what pod_phase found), else the pod's own state (a
    waiting container's reason, the scheduler's message, why it failed), with its restarts:
    " (restarts: N; last: how the container stopped before its latest start)"."""
    cstatus = container_status(pod)
    detail = phase_detail
    if not detail:
        waiting = (cstatus.get("state") or {}).get("waiting") or {}
        detail = " ".join(filter(None, [waiting.get("reason"), waiting.get("message")]))
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                detail = cond.get("message") or cond.get("reason") or detail
        if (pod.get("status") or {}).get("phase") == "Failed":
            detail = failure(pod)
        detail = one_line(detail)[:MAX_DETAIL]  # the kubelet's and the scheduler's words, as they came
    count = cstatus.get("restartCount")
    if count:
        last = last_restart(pod)
        detail = f"{detail} (restarts: {count}{f'; last: {last}' if last else ''})"
    return detail.strip()


def unschedulable_message(job: dict[str, Any], podgroups: list[dict[str, Any]]) -> str:
    """The scheduler's word on a pending job: its PodGroup's Unschedulable condition, or ''."""
    uid = job["metadata"].get("uid")
    for group in podgroups:
        owners = {o.get("uid") for o in group["metadata"].get("ownerReferences", [])}
        if uid in owners or group["metadata"]["name"] == job["metadata"]["name"]:
            for cond in (group.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "Unschedulable" and cond.get("status") == "True":
                    return one_line(cond.get("message") or cond.get("reason") or "")[:MAX_DETAIL]
    return ""


def master_exit_code(job: str, pods: list[dict[str, Any]]) -> int | None:
    """The exit code of the job's master-0 container once it has terminated, else None."""
    for pod in pods:
        if pod["metadata"]["name"] == f"{job}-master-0":
            terminated = (container_status(pod).get("state") or {}).get("terminated") or {}
            return terminated.get("exitCode")
    return None
