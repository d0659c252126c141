"""The ``fastppo`` command: one module per group of subcommands."""
