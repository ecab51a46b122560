"""Benchmark: importing 8 servers at once should take at most 1.5x importing one.

    sudo python -m tests.nodes.bench_import [--repeats 5] [--subnet 10.201.0.0/24]

Real sshd test hosts (root), the full `geotrain nodes import FILE` path in-process
(connect, host key check, fact script, public-address probe against a local stand-in,
one DB transaction). Prints the median of each and their ratio; not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import ipaddress
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from core.nodes import facts
from core.cli import main
from core.nodes.pool import public_ip_urls
from tests import testhosts


def _write_file(hosts, path: Path) -> None:
    path.write_text("".join(
        f"- {{name: {h.name}, endpoint: '{h.endpoint}', username: {h.user}, "
        f"ssh_key_path: '{h.key_path}', trust_host_key: '{h.fingerprint}'}}\n" for h in hosts))


def time_import(hosts) -> float:
    """Seconds for one `geotrain nodes import` of `hosts` into a fresh state dir."""
    with tempfile.TemporaryDirectory() as home:
        os.environ["GEOTRAIN_HOME"] = home
        servers = Path(home) / "servers.yaml"
        _write_file(hosts, servers)
        err = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(["nodes", "import", str(servers)])
        elapsed = time.perf_counter() - start
        if code != 0:
            raise SystemExit(f"import failed: {err.getvalue().strip()}")
    return elapsed


def time_script_here(n: int, script: str) -> float:
    """Seconds to run the fact script `n` times at once on this machine, without SSH:
    how much the 8 'servers' slow each other down by sharing this machine's CPUs."""
    start = time.perf_counter()
    procs = [subprocess.Popen(["sh", "-s"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(n)]
    for proc in procs:
        proc.communicate(script.encode())
    return time.perf_counter() - start


def _report(label: str, one: list[float], eight: list[float]) -> float:
    t1, t8 = statistics.median(one), statistics.median(eight)
    print(f"{label}: 1 host {t1 * 1000:6.1f} ms, 8 hosts {t8 * 1000:6.1f} ms (medians of "
          f"{len(one)}), ratio 8/1 = {t8 / t1:.2f}")
    return t8 / t1


def run(repeats: int, prefix: str, subnet: str, plain_bashrc: bool) -> float:
    with testhosts.make_hosts(8, prefix=prefix, subnet=subnet, plain_bashrc=plain_bashrc) as hosts:
        echo = testhosts.start_ip_echo(str(ipaddress.ip_network(subnet).network_address + 1))
        os.environ["GEOTRAIN_PUBLIC_IP_URLS"] = f"http://{echo.server_address[0]}:{echo.server_port}/"
        try:
            time_import(hosts[:1])  # warm-up: imports, first connection
            script = facts.script(public_ip_urls())
            one, eight, alone_one, alone_eight = [], [], [], []
            for _ in range(repeats):  # interleaved, so machine load hits all alike
                one.append(time_import(hosts[:1]))
                eight.append(time_import(hosts))
                alone_one.append(time_script_here(1, script))
                alone_eight.append(time_script_here(8, script))
        finally:
            echo.shutdown()
            echo.server_close()
    ratio = _report("geotrain nodes import        ", one, eight)
    _report("fact script alone, no SSH   ", alone_one, alone_eight)
    print(f"target 8/1 <= 1.5: {'met' if ratio <= 1.5 else 'NOT met'}; {os.cpu_count()} CPUs here, "
          f"load average {os.getloadavg()[0]:.1f} (the 8 'servers' share these CPUs)")
    return ratio


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prefix", default="gtnb")
    parser.add_argument("--subnet", default="10.201.0.0/24")
    parser.add_argument("--machine-bashrc", action="store_true",
                        help="keep this machine's /root/.bashrc for logins (all 8 \"servers\" then "
                             "share its CPU cost on this machine's cores)")
    args = parser.parse_args()
    reason = testhosts.skip_reason()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    print(f"login rc: {'this machine' if args.machine_bashrc else 'plain (fresh server)'}")
    run(args.repeats, args.prefix, args.subnet, plain_bashrc=not args.machine_bashrc)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
