"""Reading what a person wrote: files through one loader with limits, detailed-config checks.

Imports only core.errors."""
