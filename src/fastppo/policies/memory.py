"""Recurrent cores (LSTM or GRU) between the observation encoder and the heads.

The state of a core is one flat ``[batch, state_size]`` tensor (an LSTM's ``h`` and ``c`` side by
side), so that the rollout cursor, checkpoints and the ONNX graph carry a single tensor whatever
the cell. Episode boundaries are data, as everywhere in fastppo: after a row that is not a real
transition (a NEXT_STEP reset row, whose observation is the last of an episode) the state is
zeroed, so the next episode's first observation starts from zeros. The rollout and the update
apply that same rule (:func:`carry`), which is what makes the update's re-run exact.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

MemoryKind = Literal["lstm", "gru"]


def carry(state: Tensor, keep: Tensor) -> Tensor:
    """The state the next row starts from: zeros where ``keep`` [B] (the row was a real
    transition) is false."""
    return state * keep.unsqueeze(-1).to(state.dtype)


class RecurrentCore(nn.Module):
    """One LSTM or GRU cell, with CleanRL's initialisation (orthogonal weights, zero biases)."""

    def __init__(self, kind: MemoryKind, in_features: int, hidden_size: int):
        super().__init__()
        self.kind = kind
        self.hidden_size = hidden_size
        self.cell = nn.LSTMCell(in_features, hidden_size) if kind == "lstm" else nn.GRUCell(in_features, hidden_size)
        for name, param in self.cell.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.zeros_(param)

    @property
    def state_size(self) -> int:
        return 2 * self.hidden_size if self.kind == "lstm" else self.hidden_size

    def forward(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """One step: (output [B, hidden], next state [B, state_size])."""
        if self.kind == "gru":
            h = self.cell(x, state)
            return h, h
        h, c = self.cell(x, tuple(state.split(self.hidden_size, dim=-1)))
        return h, torch.cat([h, c], dim=-1)
