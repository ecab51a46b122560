"""Kubernetes Pod Security Standards ("baseline", "restricted") as checks over a pod spec.

A namespace labelled `pod-security.kubernetes.io/enforce: <level>` refuses pods that fail
its level, and a Volcano job then sits Pending with no word why. Registration and tests run
these checks on the pods geotrain renders. Each check is named after upstream's check ID:
  https://kubernetes.io/docs/concepts/security/pod-security-standards/
  kubernetes/kubernetes staging/src/k8s.io/pod-security-admission/policy/check_*.go
Not encoded: the user-namespace relaxation (hostUsers: false, KEP-127) and Windows-only fields
beyond hostProcess; geotrain renders neither.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

LEVELS = ("privileged", "baseline", "restricted")
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
POD_SECURITY_KEY = "pod_security_enforce"  # cluster config: the level read at registration

# check_capabilities_baseline.go: capabilities_allowed_1_0
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
# check_sysctls.go: sysctls_allowed_1_0 (+1.27 / 1.29 additions)
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
                "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
# check_seLinuxOptions.go
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# check_restrictedVolumes.go: the only volume sources "restricted" allows
RESTRICTED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                           "persistentVolumeClaim", "projected", "secret"}
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _containers(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """visitor.go visitContainers: containers, init containers and ephemeral containers."""
    for key in CONTAINER_LISTS:
        yield from pod.get(key) or []


def _ctx(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("securityContext") or {}


def _bad(pod: dict, test: Callable[[dict], bool]) -> list[str]:
    return [c.get("name", "?") for c in _containers(pod) if test(c)]


# baseline ---------------------------------------------------------------------------
def host_namespaces(pod: dict) -> str | None:
    shared = [f for f in ("hostNetwork", "hostPID", "hostIPC") if pod.get(f)]
    return f"{', '.join(shared)}=true" if shared else None


def privileged(pod: dict) -> str | None:
    bad = _bad(pod, lambda c: _ctx(c).get("privileged") is True)
    return f"privileged containers {bad}" if bad else None


def capabilities_baseline(pod: dict) -> str | None:
    added = {a for c in _containers(pod) for a in (_ctx(c).get("capabilities") or {}).get("add") or []}
    extra = sorted(added - BASELINE_CAPABILITIES)
    return f"non-default capabilities added: {extra}" if extra else None


def host_path_volumes(pod: dict) -> str | None:
    bad = [v.get("name") for v in pod.get("volumes") or [] if "hostPath" in v]
    return f"hostPath volumes {bad}" if bad else None


def host_ports(pod: dict) -> str | None:
    bad = _bad(pod, lambda c: any(p.get("hostPort") for p in c.get("ports") or []))
    return f"hostPort in containers {bad}" if bad else None


def app_armor_profile(pod: dict) -> str | None:
    """check_appArmorProfile.go: only RuntimeDefault or Localhost, in fields or annotations."""
    types = [_ctx(o).get("appArmorProfile", {}).get("type") for o in (pod, *_containers(pod))]
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    prefix = "container.apparmor.security.beta.kubernetes.io/"
    values = [v for k, v in annotations.items() if k.startswith(prefix)]
    bad = [t for t in types if t not in (None, "RuntimeDefault", "Localhost")]
    bad += [v for v in values if v != "runtime/default" and not v.startswith("localhost/")]
    return f"AppArmor profiles {bad}" if bad else None


def se_linux_options(pod: dict) -> str | None:
    for obj in (pod, *_containers(pod)):
        options = _ctx(obj).get("seLinuxOptions") or {}
        if options.get("type", "") not in SELINUX_TYPES or options.get("user") or options.get("role"):
            return f"seLinuxOptions {options}"
    return None


def proc_mount(pod: dict) -> str | None:
    bad = _bad(pod, lambda c: _ctx(c).get("procMount", "Default") != "Default")
    return f"procMount in containers {bad}" if bad else None


def seccomp_profile_baseline(pod: dict) -> str | None:
    types = [(_ctx(o).get("seccompProfile") or {}).get("type") for o in (pod, *_containers(pod))]
    return "seccompProfile Unconfined" if "Unconfined" in types else None


def sysctls(pod: dict) -> str | None:
    bad = [s.get("name") for s in _ctx(pod).get("sysctls") or [] if s.get("name") not in SAFE_SYSCTLS]
    return f"forbidden sysctls {bad}" if bad else None


def windows_host_process(pod: dict) -> str | None:
    objs = (pod, *_containers(pod))
    bad = any((_ctx(o).get("windowsOptions") or {}).get("hostProcess") for o in objs)
    return "windowsOptions.hostProcess=true" if bad else None


def host_probes_and_host_lifecycle(pod: dict) -> str | None:
    """check_hostProbesAndhostLifecycle.go: probes and hooks may not name another host."""
    def hosts(c: dict) -> bool:
        handlers = [c.get(p) or {} for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += list((c.get("lifecycle") or {}).values())
        return any((h.get(k) or {}).get("host") for h in handlers for k in ("httpGet", "tcpSocket"))
    bad = _bad(pod, hosts)
    return f"probe or lifecycle host set in containers {bad}" if bad else None


# restricted -------------------------------------------------------------------------
def restricted_volumes(pod: dict) -> str | None:
    bad = [v.get("name") for v in pod.get("volumes") or []
           if not set(v) - {"name"} <= RESTRICTED_VOLUME_TYPES]
    return f"volumes {bad} have restricted types" if bad else None


def allow_privilege_escalation(pod: dict) -> str | None:
    bad = _bad(pod, lambda c: _ctx(c).get("allowPrivilegeEscalation") is not False)
    return f"containers {bad} must set allowPrivilegeEscalation=false" if bad else None


def run_as_non_root(pod: dict) -> str | None:
    pod_level = _ctx(pod).get("runAsNonRoot")
    if pod_level is False or _bad(pod, lambda c: _ctx(c).get("runAsNonRoot") is False):
        return "runAsNonRoot=false is set"
    bad = _bad(pod, lambda c: _ctx(c).get("runAsNonRoot") is None and pod_level is not True)
    return f"pod or containers {bad} must set runAsNonRoot=true" if bad else None


def run_as_user(pod: dict) -> str | None:
    zero = [o.get("name", "pod") for o in (pod, *_containers(pod)) if _ctx(o).get("runAsUser") == 0]
    return f"runAsUser=0 in {zero}" if zero else None


def seccomp_profile_restricted(pod: dict) -> str | None:
    allowed = ("RuntimeDefault", "Localhost")
    pod_type = (_ctx(pod).get("seccompProfile") or {}).get("type")
    if pod_type is not None and pod_type not in allowed:
        return f"pod seccompProfile {pod_type}"
    def bad_container(c: dict) -> bool:
        kind = (_ctx(c).get("seccompProfile") or {}).get("type")
        return kind not in allowed if kind is not None else pod_type is None
    bad = _bad(pod, bad_container)
    return f"pod or containers {bad} must set seccompProfile RuntimeDefault or Localhost" if bad else None


def capabilities_restricted(pod: dict) -> str | None:
    def bad(c: dict) -> bool:
        caps = _ctx(c).get("capabilities") or {}
        extra = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        return "ALL" not in (caps.get("drop") or []) or bool(extra)
    names = _bad(pod, bad)
    return f"containers {names} must drop ALL and add at most NET_BIND_SERVICE" if names else None


BASELINE: dict[str, Callable[[dict], str | None]] = {
    "hostNamespaces": host_namespaces, "privileged": privileged,
    "capabilities_baseline": capabilities_baseline, "hostPathVolumes": host_path_volumes,
    "hostPorts": host_ports, "appArmorProfile": app_armor_profile, "seLinuxOptions": se_linux_options,
    "procMount": proc_mount, "seccompProfile_baseline": seccomp_profile_baseline, "sysctls": sysctls,
    "windowsHostProcess": windows_host_process,
    "hostProbesAndhostLifecycle": host_probes_and_host_lifecycle,
}
RESTRICTED: dict[str, Callable[[dict], str | None]] = {
    **BASELINE, "restrictedVolumes": restricted_volumes,
    "allowPrivilegeEscalation": allow_privilege_escalation, "runAsNonRoot": run_as_non_root,
    "runAsUser": run_as_user, "seccompProfile_restricted": seccomp_profile_restricted,
    "capabilities_restricted": capabilities_restricted,
}


def violations(pod: dict[str, Any], level: str) -> list[str]:
    """`check ID: why` for each check of `level` the pod spec fails; [] when it passes."""
    checks = {"privileged": {}, "baseline": BASELINE, "restricted": RESTRICTED}[level]
    return [f"{name}: {why}" for name, check in checks.items() if (why := check(pod))]


def pod_specs(job: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(task name, pod spec with the template's metadata) of every task of a Volcano job."""
    for task in job["spec"]["tasks"]:
        template = task["template"]
        yield task["name"], {**template["spec"], "metadata": template.get("metadata") or {}}


def job_violations(job: dict[str, Any], level: str) -> list[str]:
    """`task: check: why` for every task of a Volcano job that fails `level`; an unknown
    level is checked as "restricted", as the admission controller reads it."""
    level = level if level in LEVELS else "restricted"
    return [f"{task}: {v}" for task, pod in pod_specs(job) for v in violations(pod, level)]
