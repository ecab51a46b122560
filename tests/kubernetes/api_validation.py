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
