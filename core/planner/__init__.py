"""The WAN planner: what each compression preset costs on a network, and its inputs per cluster.

Pure arithmetic plus reading stored matrices; imports core.domain, core.state."""
