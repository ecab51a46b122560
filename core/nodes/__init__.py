"""The node pool over SSH: connections and pinned host keys, facts, status, import files.

facts/ is the one fact layer (the wizard runs the same script); blockers.py the one rule
set that node status and the wizard's preflight judge.

The only home of paramiko (nodes/ssh.py); imports core.state, core.domain, core.schema."""
