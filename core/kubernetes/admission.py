"""The checks Volcano's admission webhook makes that its CRD schema cannot express.

Run on every rendered job before it is submitted, so a job the webhook would refuse
is caught here with a clear message (and tested without a cluster). The lists are what every
Volcano release the wizard has installed accepts (core/bootstrap/versions.py: v1.15.1 now,
v1.11.0 on clusters built before), not Volcano's main branch: v1.15.1 adds the action
RestartPartition and the plugins hcclrank and ray (read at the tag), which v1.11.0 refuses.
"""

from __future__ import annotations

from typing import Any

from core.kubernetes.names import DNS_LABEL_RE, LABEL_MAX

# Volcano v1.11.0: pkg/webhooks/admission/jobs/validate/util.go, policyActionMap (the
# actions allowed for external use; RestartPod is there from v1.11.0, not in v1.10.0).
POLICY_ACTIONS = frozenset({"AbortJob", "RestartJob", "RestartTask", "RestartPod", "TerminateJob",
                            "CompleteJob", "ResumeJob"})
# Volcano v1.11: pkg/controllers/job/plugins/factory.go, the registered job plugins.
PLUGINS = frozenset({"env", "svc", "ssh", "pytorch", "mpi", "tensorflow"})


def _policy_errors(policies: list[dict[str, Any]], where: str) -> list[str]:
    return [f"{where}: policy action {p.get('action')!r} is not one of "
            f"{', '.join(sorted(POLICY_ACTIONS))}"
            for p in policies if p.get("action") not in POLICY_ACTIONS]


def _task_errors(job_name: str, task: dict[str, Any], seen: set[str]) -> list[str]:
    name, replicas = task.get("name", ""), task.get("replicas", 0)
    errors = []
    if name in seen:
        errors.append(f"task {name!r}: duplicate task name")
    seen.add(name)
    if not DNS_LABEL_RE.fullmatch(name):
        errors.append(f"task {name!r}: not a DNS-1035 label")
    if task.get("minAvailable", 0) > replicas:
        errors.append(f"task {name!r}: minAvailable {task['minAvailable']} > replicas {replicas}")
    longest = f"{job_name}-{name}-{max(replicas - 1, 0)}"
    if len(longest) > LABEL_MAX:
        errors.append(f"task {name!r}: pod name {longest!r} is longer than {LABEL_MAX} characters")
    return errors + _policy_errors(task.get("policies") or [], f"task {name!r}")


def admission_errors(job: dict[str, Any]) -> list[str]:
    """Every reason Volcano's webhook (and pod naming) would refuse `job`; empty if none."""
    name = job.get("metadata", {}).get("name", "")
    spec = job.get("spec", {})
    errors = [] if DNS_LABEL_RE.fullmatch(name) and len(name) <= LABEL_MAX else \
        [f"job name {name!r} is not a DNS-1035 label of at most {LABEL_MAX} characters"]
    seen: set[str] = set()
    tasks = spec.get("tasks") or []
    if not tasks:
        errors.append("job has no tasks")
    for task in tasks:
        errors += _task_errors(name, task, seen)
    total = sum(t.get("replicas", 0) for t in tasks)
    if spec.get("minAvailable", 0) > total:
        errors.append(f"job minAvailable {spec['minAvailable']} > total replicas {total}")
    errors += [f"unknown plugin {p!r}" for p in (spec.get("plugins") or {}) if p not in PLUGINS]
    return errors + _policy_errors(spec.get("policies") or [], "job")
