"""tickwheel: what the processes share — pure core, adapters, settings, errors, metrics, CLI."""
