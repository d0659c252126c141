"""fastppo: Proximal Policy Optimization for Gymnasium environments and language models."""

from fastppo.agent import Agent
from fastppo.api import evaluate, export_onnx, load, make_config, record, resume, train, train_seeds
from fastppo.config import Config

__all__ = ["Agent", "Config", "evaluate", "export_onnx", "load", "make_config", "record", "resume", "train", "train_seeds"]
__version__ = "0.1.0"
