"""geotrain core: domain, state, SSH, bootstrap, backends. Never imports textual."""

__version__ = "0.1.0"
