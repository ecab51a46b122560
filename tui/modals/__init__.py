"""Modal screens in one place: confirm, error, passphrase, help, a node's log, and the
bridge that asks them from worker threads (prompts.py). They never import a screen."""
