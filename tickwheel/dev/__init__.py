"""Development only: the local stack, `tickwheel up`, the demo, the sink and the end-to-end checker.

No production process imports this package (tests/unit/test_layers.py holds it); the CLI imports it only to run
one of its commands (`tickwheel.cli.DEV_COMMANDS`).
"""
