"""The Textual app: screens, widgets and messages. Talks only to `core`."""
