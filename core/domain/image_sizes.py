"""How much of a node's /var/lib the default images take, so the wizard's preflight refuses a
node that cannot hold its image before a pull fills the disk.

A pulled image takes its compressed layers (containerd's content store keeps them after the
unpack: the CRI plugin's `discard_unpacked_layers` is false by default, containerd
docs/cri/config.md) plus the unpacked snapshot. The sizes are about, rounded up, from public
reports, not measured here:
- rocm/pytorch: ~32 GB unpacked (ROCm/legacy-rocm-build#3935, 2024-10), up to ~54 GB for
  `latest` (ROCm/ROCm-docker#120); its compressed pulls are 10-20 GB (ROCm/ROCm-docker#166);
- pytorch/pytorch's CUDA runtime image: torch's CUDA wheels alone hold ~3.3 GB of nvidia
  libraries unpacked (IBM/text-generation-inference#50); ~10 GB unpacked, ~4 GB compressed
  (an estimate);
- nvcr.io/nvidia/pytorch (NGC, multi-arch): ~20 GB unpacked, ~10 GB compressed (an estimate).
A team's own image (--image) is of a size geotrain does not know: only the base floor holds.
"""

from __future__ import annotations

from core.domain.images import NGC_PYTORCH, UPSTREAM_IMAGES, image_for
from core.errors import InvalidInput

BASE_DISK_GB = 5.0  # k3s, containerd, Volcano's and the device plugins' images, logs
IMAGE_DISK_GB = {  # default image -> (compressed GB, unpacked GB)
    UPSTREAM_IMAGES["nvidia"]: (4.0, 10.0),
    UPSTREAM_IMAGES["amd"]: (15.0, 32.0),
    NGC_PYTORCH: (10.0, 20.0),
}


def default_image_disk(vendor: str, arch: str) -> tuple[str, float] | None:
    """(the default image a node of `vendor` on `arch` runs, GB it takes on disk), or None
    where no default runs there (a workspace needs --image)."""
    try:
        image = image_for(vendor, None, arch).image
    except InvalidInput:
        return None
    compressed, unpacked = IMAGE_DISK_GB[image]
    return image, compressed + unpacked
