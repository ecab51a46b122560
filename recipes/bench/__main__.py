"""`python -m recipes.bench`: bytes and loss per preset (`--wan`: across emulated datacenters)."""

from recipes.bench.presets import main

main()
