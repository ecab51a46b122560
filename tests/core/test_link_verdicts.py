"""`clusters check` per link, pure (core.domain.link_verdicts): which link is named slow, what a
failed or unmeasured link does to the verdict, the figure between datacenters."""

from __future__ import annotations

from core.domain.check_results import judge_node
from core.domain.link_verdicts import cluster_verdict, datacenter_links, link_entry, name_slow_link


def _link(a: str, b: str, mb_s: float | None) -> dict:
    rank = None if mb_s is None else {"rank": 0, "reduce_bytes": 1 << 20, "reduce_seconds": (1 << 20) / (mb_s * 1e6),
                                      "busbw": mb_s * 1e6, "world": 2, "backend": "gloo"}
    return link_entry(a, b, [] if rank is None else [rank, {**rank, "rank": 1, "busbw": mb_s * 1e6 * 1.1}],
                      failed=None if rank else "b: ConnectionRefusedError")


def test_the_slowest_link_is_named_only_below_half_the_others_median():
    links = [_link("a", "b", 30), _link("a", "c", 4), _link("b", "c", 28)]
    assert name_slow_link(links) == "a - c" and links[1]["slow"] and links[1]["why"].startswith("slow: 4 MB/s")
    even = [_link("a", "b", 30), _link("a", "c", 20), _link("b", "c", 28)]  # 20 is 69% of 29: not slow
    assert name_slow_link(even) is None and not any(link["slow"] for link in even)
    assert name_slow_link([_link("a", "b", 1)]) is None  # one link: nothing to compare with


def test_the_slower_rank_counts_and_a_failed_link_fails_the_check_by_name():
    assert _link("a", "b", 10)["busbw"] == 10e6
    nodes = [judge_node(n, [], [], []) for n in "abc"]
    links = [_link("a", "b", 30), _link("a", "c", None), _link("b", "c", 28)]
    verdict = cluster_verdict("eu", "ssh", nodes, links, [])
    assert not verdict["ok"] and verdict["why"] == ["link a - c: b: ConnectionRefusedError"]
    unmeasured = {**_link("a", "c", None), "ok": None, "why": "not measured: no torch on c"}
    assert cluster_verdict("eu", "ssh", nodes, [links[0], unmeasured, links[2]], [])["ok"]


def test_between_datacenters_the_slowest_node_link_counts():
    links = [_link("fra-1", "fra-2", 100), _link("fra-1", "ams-1", 40), _link("fra-2", "ams-1", 12)]
    dcs = datacenter_links(links, {"fra-1": "fra", "fra-2": "fra", "ams-1": "ams"})
    assert [(d["name"], d["busbw"], d["via"], d["links"]) for d in dcs] == [
        ("ams - fra (datacenters)", 12e6, "fra-2 - ams-1", 2)]
    assert datacenter_links(links, {}) == []  # no datacenters known: no such figure


def test_nodes_list_names_a_node_whose_last_check_failed(geotrain_home, capsys):
    from core.cli import main
    from core.domain.records import Cluster, Node
    from core.state.check_records import keep
    from core.state.cluster_records import save_cluster
    from core.state.node_records import add_nodes
    from core.state.store import Store

    store = Store()
    add_nodes(store, [Node(name=n, host=f"198.51.100.{i + 1}", username="root", cluster="eu")
                      for i, n in enumerate("ab")])
    save_cluster(store, Cluster(name="eu", kind="geotrain"), create=True)
    gpus = [{"index": 0, "name": "NVIDIA H100", "temperature_c": 40, "ecc_corrected": 0, "ecc_uncorrected": 2}]
    keep(store, "eu", cluster_verdict("eu", "ssh", [judge_node("a", [], [], []), judge_node("b", [], gpus, [])],
                                      [], [], at=0))
    assert main(["nodes", "list"]) == 0
    listed = capsys.readouterr().out
    assert "  b: checked " in listed and listed.rstrip().endswith("FAILED: GPU 0 has 2 uncorrected ECC errors")
    assert "  a: checked" not in listed  # a node that passed adds no line to the list
    assert main(["nodes", "show", "a"]) == 0
    assert any(line.startswith("check") and line.endswith(": ok") for line in capsys.readouterr().out.splitlines())


def test_a_python_path_with_shell_words_is_refused_in_one_line(geotrain_home, capsys):
    from core.cli import main
    from core.domain.records import Cluster
    from core.state.cluster_records import save_cluster
    from core.state.store import Store

    save_cluster(Store(), Cluster(name="eu", kind="geotrain"), create=True)
    for bad in ("/usr/bin/python3; id", "$(id)", "python", "/opt/my env/python3", "../python3"):
        assert main(["clusters", "check", "eu", "--python", bad]) != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "is not an absolute path" in err, err
    assert Store().get_setting("cluster_check/eu") is None  # nothing ran, nothing kept
