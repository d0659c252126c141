"""fastppo: Proximal Policy Optimization for Gymnasium environments and language models."""

from fastppo.agent import Agent
from fastppo.api import load, make_config, train
from fastppo.config import Config

__all__ = ["Agent", "Config", "load", "make_config", "train"]
__version__ = "0.1.0"
