"""What the real API server's validation says about the objects geotrain creates, for FakeKubeAPI
(a stand-in: the real server cannot run here)."""

from __future__ import annotations


def claim_problem(claim: dict) -> str:
    """What the real API server's PVC validation says (k8s pkg/apis/core/validation
    ValidatePersistentVolumeClaimSpec): access modes and a storage request are required."""
    spec = claim.get("spec") or {}
    modes = spec.get("accessModes") or []
    if not modes:
        return "spec.accessModes: Required value: at least 1 access mode is required"
    allowed = {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"}
    if any(mode not in allowed for mode in modes):
        return f"spec.accessModes: Unsupported value: {modes[0]!r}"
    if "storage" not in ((spec.get("resources") or {}).get("requests") or {}):
        return "spec.resources[storage]: Required value"
    return ""


def policy_problem(policy: dict) -> str:
    """Some of what the real API server's NetworkPolicy validation says (k8s pkg/apis/networking/
    validation ValidateNetworkPolicySpec): policy types, peers and ports that are well formed."""
    spec = policy.get("spec") or {}
    if not isinstance(spec.get("podSelector"), dict):
        return "spec.podSelector: Required value"
    if any(t not in ("Ingress", "Egress") for t in spec.get("policyTypes") or []):
        return f"spec.policyTypes: Unsupported value: {spec['policyTypes']!r}"
    for i, rule in enumerate(spec.get("ingress") or []):
        for peer in rule.get("from") or []:
            if not set(peer) & {"podSelector", "namespaceSelector", "ipBlock"}:
                return f"spec.ingress[{i}].from: Required value: must specify a peer"
        for port in rule.get("ports") or []:
            if port.get("protocol", "TCP") not in ("TCP", "UDP", "SCTP"):
                return f"spec.ingress[{i}].ports.protocol: Unsupported value: {port['protocol']!r}"
            number = port.get("port")
            if isinstance(number, int) and not 1 <= number <= 65535:
                return f"spec.ingress[{i}].ports.port: Invalid value: {number}: must be between 1 and 65535"
    return ""


def secret_problem(secret: dict) -> str:
    """Some of what the real API server's Secret validation says (k8s pkg/apis/core/validation
    ValidateSecret): a DNS-1123 subdomain name, data keys of `[-._a-zA-Z0-9]+`, 1 MiB in all."""
    import re

    name = (secret.get("metadata") or {}).get("name") or ""
    if len(name) > 253 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", name):
        return f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
    values = {**(secret.get("data") or {}), **(secret.get("stringData") or {})}
    for key in values:
        if not isinstance(key, str) or len(key) > 253 or not re.fullmatch(r"[-._a-zA-Z0-9]+", key):
            return f"data[{key}]: Invalid value: {key!r}: a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
    if sum(len(str(v)) for v in values.values()) > 1 << 20:
        return "data: Too long: must have at most 1048576 bytes"
    return ""
