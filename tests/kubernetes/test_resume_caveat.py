"""Said at deploy, in one line, when resuming depends on a rank landing on the node it wrote from
(issue 41, item 9): node directories (core.kubernetes.recovery_manifests) with several pods and
neither a ReadWriteMany class nor an HF repo. torchrun does not keep ranks on nodes
(torch/distributed/run.py, notice 6: "RANK is NOT stable")."""

from __future__ import annotations

import pytest

from core.kubernetes.recovery_manifests import resume_caveat
from tests.kubernetes.conftest import make_spec, run


@pytest.mark.parametrize("workers, recovery, said", [
    (2, {}, True),  # no class named: local-path is one node's, so each node keeps its own directory
    (2, {"host_path": "/data/ckpt"}, True),
    (1, {}, False),  # one pod: its own ReadWriteOnce claim
    (2, {"storage_class": "nfs-client"}, False),  # one ReadWriteMany claim for all
    (2, {"pvc": "team-checkpoints"}, False),  # the user's claim, mounted by every pod
    (2, {"hf_repo": "team/ckpts"}, False),  # a rank fetches its own from the hub wherever it lands
])
def test_the_caveat_is_said_only_where_ranks_must_keep_their_node(workers, recovery, said):
    line = resume_caveat(make_spec(workers=workers, recovery=recovery))
    assert bool(line) is said
    assert "\n" not in line


def test_the_dry_run_and_the_deploy_say_it(fake, kubeconfig, capsys):
    """The real CLI against FakeKubeAPI (a stand-in for the API server, which cannot run here)."""
    code, _, err = run(capsys, "clusters", "add-kubernetes", "c", "--kubeconfig", kubeconfig)
    assert code == 0, err
    deploy = ("workspaces", "deploy", "distributed-training", "--cluster", "c", "--model", "gpt-neo",
              "--size", "tiny", "--workers", "2", "--steps", "5", "--yes")
    code, out, err = run(capsys, *deploy, "--dry-run")
    assert code == 0, err
    assert "# note: each node keeps its own checkpoints and ranks are not tied to nodes" in out
    code, out, err = run(capsys, *deploy)
    assert code == 0, err
    assert [line for line in err.splitlines() if line.startswith("note: each node keeps")]
