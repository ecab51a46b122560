"""Datacenters as Kubernetes and the training workers see them.

A node's `datacenter` becomes the well-known zone label on its Kubernetes Node (the cluster
wizard sets it), the Volcano job places one task per datacenter on that label, and every
worker is told where it sits through the environment below (recipes read the same names).
"""

from __future__ import annotations

import re

from core.errors import InvalidInput

# Kubernetes' well-known label for a failure domain (kubernetes.io/docs/reference/labels-
# annotations-taints/#topologykubernetesiozone); schedulers and spread constraints know it.
ZONE_LABEL = "topology.kubernetes.io/zone"

# What each worker is told (recipes/ reads exactly these names).
DATACENTER_ENV = "GEOTRAIN_DATACENTER"  # the datacenter's name
DC_INDEX_ENV = "GEOTRAIN_DC_INDEX"  # 0..K-1, datacenters in sorted name order
DC_COUNT_ENV = "GEOTRAIN_DC_COUNT"  # K
DC_RANK_ENV = "GEOTRAIN_DC_RANK"  # rank inside the datacenter
DC_SIZE_ENV = "GEOTRAIN_DC_SIZE"  # workers in that datacenter

# A label value (k8s.io/apimachinery validation.IsValidLabelValue): at most 63 characters,
# alphanumerics, '-', '_' and '.', beginning and ending with an alphanumeric.
_LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def check_datacenter(name: str, where: str) -> str:
    """`name` unchanged when Kubernetes takes it as a label value, else a one-line InvalidInput."""
    if isinstance(name, str) and _LABEL_VALUE_RE.fullmatch(name):
        return name
    shown = repr(name[:70] + ("…" if len(name) > 70 else "")) if isinstance(name, str) else repr(name)
    raise InvalidInput(f"{where}: datacenter {shown} is not a Kubernetes label value",
                       "use at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
                       "letter or digit (e.g. fra-1)")
