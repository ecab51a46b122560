"""State on this machine: the SQLite store and its records, the secret store, the data dir.

Imports core.domain, core.schema, core.errors."""
