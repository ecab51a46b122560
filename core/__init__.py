"""geotrain core: everything but the screens. Never imports textual, tui or recipes,
save recipes.schema (the torch-free typed training config both sides share).

    errors.py       errors a person can cause: what was wrong and what to do
    workspaces.py   the workspace service the CLI and the app call
    schema/         reading what a person wrote: one loader, typed checks, config docs
    domain/         nodes, clusters, workspaces, specs; the recipe catalog as data
    state/          SQLite store and its records, secret store, data dir
    nodes/          the node pool over SSH: ssh, host keys, facts, status, import files
    bootstrap/      the cluster wizard: containerd, WireGuard, k3s, Volcano, teardown
    kubernetes/     API client, Volcano manifests, names, admission rules, pod logs
    backends/       where workspaces run: local processes or a Kubernetes cluster
    planner/        the WAN planner: which preset keeps the GPUs busy on a network
    requirements/   disk, memory, GPU memory, dataset access, W&B key: checked before deploy
    cli/            the headless commands

tests/test_import_contract.py checks who may import whom.
"""


def version() -> str:
    """The installed distribution's version (pyproject.toml is the one place it is written)."""
    from importlib import metadata  # ~10 ms at import: only when the version is asked for

    try:
        return metadata.version("geotrain")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"
