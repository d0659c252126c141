"""``python -m fastppo``: the ``fastppo`` command, as ``torchrun -m fastppo train ...`` runs it."""

from fastppo.cli.main import console

# Guarded: a process that multiprocessing spawns (train --seeds) imports this module as __mp_main__.
if __name__ == "__main__":
    console()
