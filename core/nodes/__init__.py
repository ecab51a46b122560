"""The node pool over SSH: connections and pinned host keys, facts, status, import files.

The only home of paramiko (nodes/ssh.py); imports core.state, core.domain, core.schema."""
