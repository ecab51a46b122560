"""Requirements checked before a workspace is submitted: free disk, memory and GPU memory
on every machine the job will use, the HF token's access to a gated dataset, the W&B key.

    needs.py          what a model, size and placement need (pure; estimates stated once)
    machine.py        one machine's facts judged against those needs (pure)
    local_machine.py  this machine's facts, for the `local` cluster
    placement.py      which machines a job uses, with fresh facts (stale ones refreshed)
    hub_access.py     the token's access to a gated Hub dataset (huggingface_hub)
    wandb_key.py      a W&B key's format, and the server's answer when it can be asked
    report.py         the findings as one table: machine, check, found, needed, what to do
    check.py          check_before_deploy(): the one call the CLI and the app make

Imports core.errors, core.schema, core.domain, core.state, core.nodes, core.kubernetes.
"""
