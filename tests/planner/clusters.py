"""A cluster in three datacenters with one bad link, as the wizard would have recorded it."""

from __future__ import annotations

from core.domain.records import Cluster, Node
from core.state.cluster_records import save_cluster
from core.state.node_records import add_nodes
from core.state.store import Store

# fra: 2 x 8 H100, ams: 8, lon: 4 behind 10 Mbit/s; fra-b's link to ams is the slowest good one
NODES = [("fra-a", "fra", 8), ("fra-b", "fra", 8), ("ams-a", "ams", 8), ("lon-a", "lon", 4)]
RATES = {("fra-a", "fra-b"): 25000, ("fra-a", "ams-a"): 1000, ("fra-b", "ams-a"): 800,
         ("fra-a", "lon-a"): 10, ("fra-b", "lon-a"): 10, ("ams-a", "lon-a"): 10}


def seed_three_datacenters(store: Store, name: str = "eu", lon_mbit: float = 10) -> None:
    add_nodes(store, [Node(name=n, host=f"198.51.100.{i + 1}", username="root", datacenter=dc, cluster=name,
                           facts={"gpus": [{"vendor": "nvidia", "name": "H100"}] * gpus})
                      for i, (n, dc, gpus) in enumerate(NODES)])
    save_cluster(store, Cluster(name=name, kind="geotrain"), create=True)
    with store.write() as conn:
        for (src, dst), mbit in RATES.items():
            mbit = lon_mbit if "lon-a" in (src, dst) else mbit
            for a, b in ((src, dst), (dst, src)):
                conn.execute("INSERT INTO net_matrix(cluster, src, dst, latency_ms, mbit_s, measured_at)"
                             " VALUES (?, ?, ?, 15.0, ?, 0)", (name, a, b, mbit))
