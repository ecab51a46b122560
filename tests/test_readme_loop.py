"""README.md's "Bring your own loop" example runs as written: alone (one worker) and as a
custom-training command on 2 real workers (run_ranks: the local workspace's FileStore group)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from recipes.bench.local_group import run_ranks

README = Path(__file__).resolve().parents[1] / "README.md"


def snippet() -> str:
    section = README.read_text().split("## Bring your own loop", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_is_short():
    assert len(snippet().strip().splitlines()) <= 13


@pytest.mark.slow
def test_the_readme_example_runs_alone_and_on_two_workers(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(snippet())
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "GEOTRAIN_GROUP_STORE")}
    alone = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env={**env, "OMP_NUM_THREADS": "1"},
                           capture_output=True, text=True, timeout=300)
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert re.search(r"loss [0-9.]+, sent 0 bytes", alone.stdout)  # one worker: nothing crosses a wire
    two = run_ranks([], 2, {**env, "OMP_NUM_THREADS": "1"}, tmp_path, timeout=300,
                    command=[sys.executable, str(script)])
    assert two.returncode == 0, two.stderr[-2000:]
    sent = [int(n.replace(",", "")) for n in re.findall(r"sent ([0-9,]+) bytes", two.stdout)]
    print(two.stdout.splitlines()[-1])
    assert len(sent) == 2 and sent[0] == sent[1] > 0
