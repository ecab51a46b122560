"""The domain: nodes, clusters, workspaces and their specs, the recipe catalog as data.

Typed records and their validation; imports only core.errors and core.schema."""
