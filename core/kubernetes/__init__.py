"""Kubernetes: the API client, Volcano Job manifests, names, admission rules, pod logs,
node groups and cluster registration.

The only importer of the `kubernetes` client (client, pod_logs, registration) with
backends/kubernetes.py; manifests and admission are pure.

Imports core.domain, core.state, core.schema, core.errors.
"""
