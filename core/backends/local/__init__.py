"""The embedded `local` cluster: a detached supervisor runs torchrun (or an elastic worker
pool) per workspace; any later process re-attaches through its files."""
