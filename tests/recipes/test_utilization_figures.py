"""Every rank's utilization figures (recipes.telemetry): CPU share, seconds waited in collectives
(the training thread's only), no GPU fields on a CPU."""

from __future__ import annotations

import json
import threading
import time

import torch

from recipes import telemetry
from recipes.distributed import Wire


class SlowWork:
    def wait(self):
        time.sleep(0.05)
        return True

    def is_completed(self):
        return False


def test_a_timed_wait_counts_on_the_training_thread_only():
    figures = telemetry.Utilization(rank=3)
    telemetry.timed(SlowWork()).wait()
    other = threading.Thread(target=lambda: telemetry.timed(SlowWork()).wait())
    other.start()
    other.join()
    got = figures.sample()
    assert 0.05 <= got["wait_s"] < 0.1 and got["rank"] == 3
    assert telemetry.timed(None) is None and telemetry.timed(SlowWork()).is_completed() is False
    assert figures.sample()["wait_s"] < 0.01  # each interval counts from the last sample


def test_cpu_share_and_no_gpu_fields_on_a_cpu(capsys):
    figures = telemetry.Utilization(rank=0, device=torch.device("cpu"))
    deadline = time.perf_counter() + 0.1
    while time.perf_counter() < deadline:
        pass
    got = figures.report(step=10)
    assert 0.5 < got["cpu"] <= 64 and got["wall_s"] >= 0.1
    assert "gpu" not in got and "gpu_memory_bytes" not in got
    event = json.loads(capsys.readouterr().out.split("geotrain-event ", 1)[1])
    assert event["kind"] == "utilization" and event["step"] == 10 and event["cpu"] == got["cpu"]


def test_one_rank_waits_on_nothing():
    figures = telemetry.Utilization(rank=0)
    Wire(1).all_reduce_mean_(torch.ones(4))
    assert figures.sample()["wait_s"] == 0
