"""The TCPStore elastic DiLoCo workers meet in (recipes.elastic), in a process of its own
so that it outlives any worker:

    python -m recipes.elastic_store --port 0 --port-file RUN_DIR/elastic_store.port

With --port 0 the kernel picks a free port; it is written to --port-file (atomically)
once the store listens.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import torch.distributed as dist


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipes.elastic_store")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", help="write the listening port here")
    args = parser.parse_args(argv)
    store = dist.TCPStore(args.host, args.port, is_master=True, wait_for_workers=False)
    if args.port_file:
        path = Path(args.port_file)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(str(store.port))
        os.replace(tmp, path)
    print(f"elastic store listening on port {store.port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    return 0


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    sys.exit(main())
