"""The optional `images` step: pull the image workspaces will run into every node's
containerd (the `k8s.io` namespace kubelet reads), so a first workspace does not sit for
minutes pulling several GB while its rendezvous waits.

Which image a node gets is core.domain.images' answer for its GPU vendor (from the node's
facts): the one the pod command and the requirements check use. An image already present
is not pulled again. The pull needs the registry (Docker Hub for the upstream images); in
an air-gapped site, import the image with `ctr -n k8s.io images import` instead.
"""

from __future__ import annotations

import shlex

from core.bootstrap.containerd import SOCKET
from core.bootstrap.plan import DeployContext, NodeTarget, ProgressEvent
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed
from core.domain.images import image_for, qualified, vendor_of_facts

PULL_TIMEOUT_S = 3600  # a multi-GB image over a slow WAN link
CTR = f"ctr --address {SOCKET} -n k8s.io"


def node_image(ctx: DeployContext, target: NodeTarget) -> str:
    """The fully qualified image `target` runs (its vendor from the facts; the cluster's own
    image where it has one)."""
    return qualified(image_for(vendor_of_facts(target.facts), ctx.plan.image).image)


def present_command(ref: str) -> str:
    return f"{CTR} images ls -q name=={shlex.quote(ref)} | grep -qxF {shlex.quote(ref)}"


def pull_command(ref: str) -> str:
    return f"{CTR} images pull {shlex.quote(ref)}"


def _pull(ctx: DeployContext, target: NodeTarget) -> str:
    target.gather_facts()
    arch = (target.facts.get("system") or {}).get("arch")
    if not ctx.plan.image and arch not in (None, "x86_64", "amd64"):
        return (f"skipped: the upstream PyTorch images are built for amd64, and {target.name} is "
                f"{arch}: deploy workspaces with --image (an {arch} build of your own)")
    ref = node_image(ctx, target)
    if target.session.fact(present_command(ref)).ok:
        return f"{ref} present"
    ctx.emit(ProgressEvent(target.name, STEP_NAME, 0.1, f"pulling {ref} (several GB: minutes)"))
    try:
        target.session.change(pull_command(ref), timeout=PULL_TIMEOUT_S, what=f"pulling {ref}")
    except StepFailed as exc:
        raise StepFailed(f"{exc}: the node must reach the image's registry (Docker Hub for the "
                         "upstream images); on a node without internet, copy the image over and "
                         f"import it (`ctr -n k8s.io images import FILE.tar`), then re-run") from None
    return f"{ref} pulled"


STEP_NAME = "images"
STEP = Step(STEP_NAME, [Phase("pull", _pull)])
