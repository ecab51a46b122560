"""Names Kubernetes accepts: job/pod/secret names from workspace ids, and image references.

Pods of a Volcano job are named `<job>-<task>-<index>` and their hostname must be a
DNS label (≤ 63 characters), so the job name is kept short enough for that.
"""

from __future__ import annotations

import hashlib
import re

from core.errors import InvalidInput

LABEL_MAX = 63
JOB_NAME_MAX = 40  # + "-worker-nvidia-" + 4 index digits stays ≤ 63
DNS_LABEL_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

# The grammar of github.com/distribution/reference, written out piece by piece.
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_PART}(?:/{_PATH_PART})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_RE = re.compile(rf"^(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$")


def validate_image(image: str) -> str:
    """The image reference unchanged, or InvalidInput saying what is wrong with it."""
    match = IMAGE_RE.fullmatch(image or "")
    if not match or len(match.group("name")) > 255:
        raise InvalidInput(
            f"image: {image!r} is not a valid container image name",
            "use REGISTRY/PATH[:TAG][@sha256:DIGEST] in lower case, "
            "e.g. registry.example.com/team/recipes:1.0")
    return image


def rocm_variant(image: str) -> str:
    """The AMD (ROCm) build of an image: tag suffixed `-rocm`; digests are used as given."""
    match = IMAGE_RE.fullmatch(image)
    if match is None or match.group("digest"):
        return image
    return f"{match.group('name')}:{match.group('tag') or 'latest'}-rocm"


def job_name(workspace_id: str) -> str:
    """A DNS-1035 label for the Volcano job; a hash keeps altered ids distinct."""
    base = re.sub(r"[^a-z0-9-]+", "-", workspace_id.lower()).strip("-")
    name = f"gt-{base}"
    if base == workspace_id and len(name) <= JOB_NAME_MAX:
        return name
    digest = hashlib.sha1(workspace_id.encode()).hexdigest()[:6]
    return f"gt-{base[:JOB_NAME_MAX - 10]}".rstrip("-") + f"-{digest}"


def label_value(text: str) -> str:
    """A valid label value for `text` (ids are usually valid as they are)."""
    if len(text) <= LABEL_MAX and LABEL_VALUE_RE.fullmatch(text):
        return text
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:LABEL_MAX - 9].strip("-_.")
    return f"{cleaned}-{digest}" if cleaned else digest
