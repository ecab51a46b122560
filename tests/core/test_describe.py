"""One plain-text description of ages, GPUs and nodes, shared by `geotrain nodes …` and the app."""

from core.domain import describe
from core.domain.records import Node

FACTS = {"gpus": [{"index": 0, "name": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920, "driver": "550.1"},
                  {"index": 1, "name": "NVIDIA A100-SXM4-80GB"}],
         "cpu": {"model": "Xeon", "cores": 64}, "memory": {"total_mb": 524288}}


def test_age_takes_the_largest_whole_unit_and_never_goes_negative():
    assert [describe.age(s) for s in (-5, 0, 59.9, 60, 3599, 3600, 86400 * 3 + 5)] == \
        ["0s", "0s", "59s", "1m", "59m", "1h", "3d"]


def test_gpu_summary_and_list():
    assert describe.gpu_summary(FACTS) == "2× A100-SXM4-80GB"
    assert describe.gpu_summary({}) == "—" and describe.gpu_summary({}, none="-") == "-"
    assert describe.gpu_list(FACTS) == ("#0 NVIDIA A100-SXM4-80GB 81920 MiB (driver 550.1), "
                                        "#1 NVIDIA A100-SXM4-80GB ? MiB (driver ?)")
    assert describe.gpu_list({}) == "none"


def test_cli_and_app_describe_a_node_with_the_same_cells():
    node = Node(name="fra-1", host="10.0.0.1", username="ubuntu", datacenter="frankfurt", facts=FACTS)
    assert describe.node_table_row(node) == ["frankfurt", "AVAILABLE", "2× A100-SXM4-80GB", "64", "512 GiB"]
    rows = dict(describe.node_detail_rows(node, "free"))
    assert rows["endpoint"] == "ubuntu@10.0.0.1:22" and rows["cpu"] == "Xeon, 64 cores"
    assert rows["udp 51820"] == "free" and rows["memory"] == "512.0 GiB"
    lines = describe.node_panel_lines(node)
    assert lines[0] == "ubuntu@10.0.0.1:22" and "gpus        2× A100-SXM4-80GB" in lines
