"""`clusters check` per link, pure (a link not measured, e.g. no torch on a node, has ok None): each pair's 2-rank all-reduce (bus bandwidth, nccl-tests'
convention) beside the network matrix's probe, the slow link named, and the figure between
datacenters (the slowest node pair across them: what a cross-datacenter collective meets)."""

from __future__ import annotations

import statistics
import time

SLOW_LINK_SHARE = 0.5  # a link below half the median of the others is named as the slow one


def link_entry(a: str, b: str, ranks: list[dict], failed: str | None = None, probe: dict | None = None) -> dict:
    """One pair's result from its ranks' parsed lines (check_results.parse_link_line); the slower rank's
    figure counts. `probe`: the matrix's {"ping_ms", "mbit_s"} for the pair, when measured."""
    probe = probe or {}
    entry = {"name": f"{a} - {b}", "a": a, "b": b, "kind": "node", "bytes": 0, "seconds": 0.0, "busbw": 0.0,
             "world": 2, "ok": False, "why": None, "slow": False,
             "ping_ms": probe.get("ping_ms"), "probe_mbit_s": probe.get("mbit_s")}
    if failed or len(ranks) < 2:
        entry["why"] = failed or f"{2 - len(ranks)} of 2 ranks gave no result"
        return entry
    slowest = min(ranks, key=lambda r: r["busbw"])
    entry.update(bytes=slowest["reduce_bytes"], seconds=slowest["reduce_seconds"], busbw=slowest["busbw"],
                 world=slowest["world"], ok=True)
    return entry


def name_slow_link(links: list[dict]) -> str | None:
    """Mark the slowest measured link as slow when it is below SLOW_LINK_SHARE of the median of the
    others (at least two links measured); its why says so. Returns its name or None."""
    measured = [link for link in links if link["ok"]]
    if len(measured) < 2:
        return None
    slowest = min(measured, key=lambda link: link["busbw"])
    others = statistics.median(link["busbw"] for link in measured if link is not slowest)
    if slowest["busbw"] >= SLOW_LINK_SHARE * others:
        return None
    slowest["slow"] = True
    slowest["why"] = (f"slow: {slowest['busbw'] / 1e6:.3g} MB/s bus bandwidth, {slowest['busbw'] / others:.0%} of "
                      f"the other links' median {others / 1e6:.3g} MB/s")
    return slowest["name"]


def datacenter_links(links: list[dict], datacenter_of: dict[str, str | None]) -> list[dict]:
    """Per pair of datacenters, the slowest node link between them (derived, nothing run again)."""
    pairs: dict[tuple[str, str], list[dict]] = {}
    for link in links:
        one, two = datacenter_of.get(link["a"]), datacenter_of.get(link["b"])
        if link["kind"] == "node" and one and two and one != two:
            pairs.setdefault(tuple(sorted((one, two))), []).append(link)
    out = []
    for (one, two), members in sorted(pairs.items()):
        measured = [m for m in members if m["ok"]]
        worst = min(measured, key=lambda m: m["busbw"]) if measured else members[0]
        out.append({**worst, "name": f"{one} - {two} (datacenters)", "a": one, "b": two, "kind": "datacenters",
                    "slow": False, "ok": True if measured else None,
                    "why": None if measured else "no link between them was measured",
                    "via": worst["name"], "links": len(members)})
    return out


def cluster_verdict(cluster: str, kind: str, nodes: list[dict], links: list[dict], notes: list[str],
                    at: float | None = None) -> dict:
    """The whole check: ok when every node and every node link is; the slow link named (not a failure)."""
    slow = name_slow_link([link for link in links if link["kind"] == "node"])
    failed = [f"link {link['name']}: {link['why']}" for link in links
              if link["kind"] != "datacenters" and link["ok"] is False]
    ok = all(node["ok"] for node in nodes) and not failed
    return {"cluster": cluster, "kind": kind, "checked_at": time.time() if at is None else at, "ok": ok,
            "nodes": nodes, "links": links, "slow_link": slow, "why": failed, "notes": notes}
