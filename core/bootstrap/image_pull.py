"""The optional `images` step: pull the image workspaces will run into every node's
containerd (the `k8s.io` namespace kubelet reads), so a first workspace does not sit for
minutes pulling several GB while its rendezvous waits.

Which image a node gets is core.domain.images' answer for its GPU vendor (from the node's
facts): the one the pod command and the requirements check use. An image already present
is not pulled again. The pull needs the registry (Docker Hub for the upstream images); in
an air-gapped site, import the image with `ctr -n k8s.io images import` instead.

A private registry is not logged in to here: ctr takes a password only in its argv
(`--user USER:PASSWORD`, seen by every local user in `ps`) or from a prompt on a terminal
(containerd cmd/ctr/commands/resolver.go, GetResolver/passwordPrompt), so a private image is
not pre-pulled; the workspace's pods pull it with their own pull Secret (`workspaces deploy
--registry-user`, core.kubernetes.registry_auth).
"""

from __future__ import annotations

import shlex

from core.bootstrap.containerd import SOCKET
from core.bootstrap.plan import DeployContext, NodeTarget, ProgressEvent
from core.bootstrap.registry_mirrors import CERTS_DIR
from core.bootstrap.runner import Phase, Step
from core.bootstrap.session import StepFailed
from core.domain.architectures import node_arch
from core.domain.images import image_for, qualified, vendor_of_facts
from core.errors import InvalidInput

PULL_TIMEOUT_S = 3600  # a multi-GB image over a slow WAN link
CTR = f"ctr --address {SOCKET} -n k8s.io"


def node_image(ctx: DeployContext, target: NodeTarget) -> str:
    """The fully qualified image `target` runs (its vendor and architecture from the facts; the
    cluster's own image where it has one). InvalidInput: no default image for this node."""
    facts = target.facts
    return qualified(image_for(vendor_of_facts(facts), ctx.plan.image, node_arch(facts)).image)


def present_command(ref: str) -> str:
    return f"{CTR} images ls -q name=={shlex.quote(ref)} | grep -qxF {shlex.quote(ref)}"


def pull_command(ref: str, mirrors: bool = False) -> str:
    """ctr reads no CRI config: with mirrors it is given their hosts.toml dir (containerd docs/hosts.md)."""
    hosts = f" --hosts-dir {CERTS_DIR}" if mirrors else ""
    return f"{CTR} images pull{hosts} {shlex.quote(ref)}"


def _pull(ctx: DeployContext, target: NodeTarget) -> str:
    target.gather_facts()
    try:
        ref = node_image(ctx, target)
    except InvalidInput as exc:  # e.g. AMD on arm64: workspaces there need --image
        return f"skipped: {exc.message}: deploy workspaces with --image"
    if target.session.fact(present_command(ref)).ok:
        return f"{ref} present"
    ctx.emit(ProgressEvent(target.name, STEP_NAME, 0.1, f"pulling {ref} (several GB: minutes)"))
    try:
        target.session.change(pull_command(ref, bool(ctx.plan.registry_mirrors)), timeout=PULL_TIMEOUT_S,
                              what=f"pulling {ref}")
    except StepFailed as exc:
        raise StepFailed(f"{exc}: the node must reach the image's registry (Docker Hub for the "
                         "upstream images); on a node without internet, copy the image over and "
                         f"import it (`ctr -n k8s.io images import FILE.tar`), then re-run; a private "
                         "registry's image is not pre-pulled: leave out the images step, and the pods "
                         "pull it (workspaces deploy --registry-user)") from None
    return f"{ref} pulled"


STEP_NAME = "images"
STEP = Step(STEP_NAME, [Phase("pull", _pull)])
