"""One screen per file. Screens never import each other: they post messages or call the app,
which owns navigation and the services (tests/test_import_contract.py checks this)."""
