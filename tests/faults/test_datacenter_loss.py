"""A whole datacenter lost and rejoining (issue 40), on emulated datacenters (root: network namespaces).

Real parts: `python -m recipes.elastic_store` in the hub namespace (where the watcher pod's store
would be), 2 datacenters x 2 `recipes.train` workers in elastic DiLoCo, each datacenter in its own
namespace behind a shaped veth uplink (recipes.bench.netns). Datacenter 1's uplink is cut; datacenter
0 averages outer steps over itself alone; the link comes back; datacenter 1's workers rejoin with
the global state from datacenter 0 and every rank ends on the same global weights. The WAN's bytes
are counted on the uplinks' interfaces and by the workers (leaders' exchange vs inside a datacenter).
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from tests.faults.datacenters import Cluster
from tests.faults.faults import wait_for

pytestmark = pytest.mark.slow
STEPS, INNER = 160, 8


@pytest.fixture
def wan():
    if os.geteuid() != 0:
        pytest.skip("emulated datacenters need root: network namespaces and tc")
    if shutil.which("tc") is None or shutil.which("ip") is None:
        pytest.skip("iproute2 (ip, tc) is not installed")
    from recipes.bench.netns import Wan

    wan = Wan(datacenters=2, mbit=100).up()
    yield wan
    wan.down()


def _solo_steps(cluster: Cluster) -> list[int]:
    """Outer steps datacenter 0 averaged over its own members only."""
    return [e["step"] for e in cluster.events(0, "outer_step") if e.get("datacenters", {}).keys() == {"dc0"}]


def test_a_datacenter_lost_and_rejoining(wan, tmp_path):
    cluster = Cluster(tmp_path, steps=STEPS, inner=INNER, wan=wan)
    try:
        cluster.start()
        wait_for(lambda: min(cluster.last_step(r) for r in range(4)) >= 2 * INNER + 2, 300,
                 "all four workers past two outer steps")
        tx_before = wan.tx_bytes_per_dc()
        cluster.set_link(1, up=False)
        cut_at = cluster.last_step(0)
        # datacenter 0 goes on: two outer steps averaged over its own two workers
        wait_for(lambda: len(_solo_steps(cluster)) >= 2, 300, "datacenter 0 training on alone")
        assert cluster.last_step(0) >= cut_at + INNER
        assert all(proc.poll() is None for proc in cluster.workers.values())  # nobody restarted
        cluster.set_link(1, up=True)
        wait_for(lambda: all(cluster.events(r, "rejoined") for r in (2, 3)), 300, "datacenter 1 to rejoin")
        codes = [proc.wait(timeout=600) for proc in cluster.workers.values()]
        assert codes == [0, 0, 0, 0], [cluster.log_path(r).read_text()[-2000:] for r in range(4)]
    finally:
        cluster.stop()
    rejoined = [cluster.events(r, "rejoined")[0] for r in (2, 3)]
    assert all(e["source"] in (0, 1) and e["outer_step"] > max(_solo_steps(cluster)) - 1 for e in rejoined)
    assert cluster.starts == {0: 1, 1: 1, 2: 1, 3: 1}  # no process of either datacenter was restarted
    finals = cluster.finals()
    assert all(torch.equal(finals[0], f) for f in finals[1:])  # ranks equal after the rejoin
    alone = [e for e in cluster.events(0, "outer_step") if e["step"] in _solo_steps(cluster)]
    # while alone, datacenter 0's exchange stayed inside it: no WAN bytes, its LAN bytes grew
    assert len({e["wan_bytes"] for e in alone}) == 1 and alone[-1]["lan_bytes"] > alone[0]["lan_bytes"]
    last = cluster.events(0, "outer_step")[-1]
    assert last["datacenters"] == {"dc0": [0, 1], "dc1": [2, 3]}
    result = cluster.result()
    tx_after = wan.tx_bytes_per_dc()
    # bytes counted: the leaders' exchange crossed the WAN, their datacenters' share stayed inside
    assert result["bytes_sent"] > 0 and result["lan_bytes"] > 0
    assert all(after > before for before, after in zip(tx_before, tx_after))
    print(f"solo outer steps of dc0: {_solo_steps(cluster)}; rejoined: {rejoined}; "
          f"rank 0 WAN {result['bytes_sent']:,} B, LAN {result['lan_bytes']:,} B; "
          f"uplink tx since the cut {[a - b for a, b in zip(tx_after, tx_before)]}")
