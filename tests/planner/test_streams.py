"""`clusters plan --streams N` (issue 43): the striped multi-stream setting (GEOTRAIN_WAN_STREAMS,
an environment variable of the workers) as a planner input that the plan prints. A link measured at
one TCP stream's ceiling (a window per round trip) counts N times; a link below it is bound by its
line and does not (the WAN bench: 4 streams sped DDP up 2.5x at 100 ms with 256 KB buffers, and not
at all without the cap)."""

from __future__ import annotations

import json

import pytest

from core.cli import main
from core.errors import InvalidInput
from core.planner.cluster_inputs import plan_for_cluster
from core.planner.streams import ceiling_mbit_s, with_streams
from core.planner.wan_what_if import Link

# 100 ms round trips; one stream with a 256 KiB window carries at most 20.97 Mbit/s
LONG_FAT = "links:\n  - {src: a, dst: b, latency_ms: 100, mbit_s: 20}\n  - {src: b, dst: a, latency_ms: 100, mbit_s: 20.5}\n"
LINE_BOUND = "links:\n  - {src: a, dst: b, latency_ms: 100, mbit_s: 20}\n  - {src: b, dst: a, latency_ms: 100, mbit_s: 5}\n"


def test_a_window_bound_link_counts_n_times_and_a_line_bound_one_does_not():
    assert ceiling_mbit_s(100, 256 * 1024) == pytest.approx(20.97, abs=0.01)
    links, assumed = with_streams([Link("a", "b", 100, 20), Link("b", "a", 100, 5), Link("a", "c", 0, 900)], 4,
                                  256 * 1024)
    assert [link.mbit_s for link in links] == [80, 5, 900]
    assert (assumed.streams, assumed.window_bound, assumed.links) == (4, 1, 3)
    assert with_streams([Link("a", "b", 100, 20)], 1, 256 * 1024)[0][0].mbit_s == 20


def test_the_plan_prints_the_streams_it_assumes(tmp_path, capsys, monkeypatch):
    matrix = tmp_path / "fat.yaml"
    matrix.write_text(LONG_FAT)
    one = plan_for_cluster(None, None, "gpt-neo", "125m", matrix_file=matrix, step_time=0.5)
    four = plan_for_cluster(None, None, "gpt-neo", "125m", matrix_file=matrix, step_time=0.5, streams=4,
                            window_bytes=256 * 1024)
    assert (one.network.mbit_s, four.network.mbit_s) == (20, 80)
    ddp = {e.preset: e for e in four.estimates}["none"], {e.preset: e for e in one.estimates}["none"]
    assert ddp[0].sync_s < ddp[1].sync_s / 3
    assert main(["clusters", "plan", "--matrix", str(matrix), "--model", "gpt-neo", "--size", "125m",
                 "--step-time", "0.5", "--streams", "4", "--window-kb", "256"]) == 0
    out = capsys.readouterr().out
    assert "assumes 4 TCP streams per peer (GEOTRAIN_WAN_STREAMS=4): 2 of 2 links window-bound" in out
    assert "bottleneck 80 Mbit/s" in out
    monkeypatch.setenv("GEOTRAIN_WAN_STREAMS", "2")  # the workers' setting is the default
    assert main(["clusters", "plan", "--matrix", str(matrix), "--model", "gpt-neo", "--size", "125m",
                 "--step-time", "0.5", "--window-kb", "256", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["streams"] == {"streams": 2, "window_bytes": 262144, "window_bound": 2, "links": 2}
    assert data["network"]["mbit_s"] == 40


def test_a_line_bound_link_keeps_the_bottleneck(tmp_path):
    matrix = tmp_path / "line.yaml"
    matrix.write_text(LINE_BOUND)
    plan = plan_for_cluster(None, None, "gpt-neo", "125m", matrix_file=matrix, step_time=0.5, streams=4,
                            window_bytes=256 * 1024)
    assert plan.network.mbit_s == 5 and plan.streams.window_bound == 1


@pytest.mark.parametrize("value", ["0", "four", "65", "-1"])
def test_a_bad_setting_is_one_line(value, tmp_path, capsys, monkeypatch):
    matrix = tmp_path / "fat.yaml"
    matrix.write_text(LONG_FAT)
    monkeypatch.setenv("GEOTRAIN_WAN_STREAMS", value)
    assert main(["clusters", "plan", "--matrix", str(matrix), "--model", "gpt-neo", "--size", "125m"]) != 0
    err = capsys.readouterr().err
    assert "GEOTRAIN_WAN_STREAMS is" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(InvalidInput):
        with_streams([], 0)
