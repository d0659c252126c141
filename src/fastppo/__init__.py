"""fastppo: Proximal Policy Optimization for Gymnasium environments and language models."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Agent",
    "Config",
    "evaluate",
    "export_onnx",
    "load",
    "make_config",
    "record",
    "resume",
    "train",
    "train_seeds",
]
__version__ = "0.1.0"

# Imported on first use, not with the package: the ``fastppo`` command imports torch inside its
# own error handling, so that a Ctrl-C during its start-up is one line, not a traceback.
_HOMES = {"Agent": "fastppo.agents.agent", "Config": "fastppo.config"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'fastppo' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES.get(name, "fastppo.api")), name)
    globals()[name] = value
    return value
