"""``python -m fastppo.cli``: the ``fastppo`` command."""

from fastppo.cli.main import console

if __name__ == "__main__":
    console()
