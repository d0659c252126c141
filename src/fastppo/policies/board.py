"""The board encoder (``--policy.encoder board``): a small residual CNN over a board game's planes,
AlphaZero's tower (Silver et al. 2017) without its batch norm, which a population's vmap and
PPO's changing batches would both have to work around.

A row of a game is flat, ``[global state | the board's planes | the seat's one-hot id]``
(``fastppo.envs.layout``); the encoder reads the board's columns as an image, a 3x3 convolution
to ``channels`` planes and ``blocks`` residual blocks of two 3x3 convolutions (padding 1: the
board keeps its size, so a corner cell and a centre cell are seen alike), and joins the tower's
output with the row's other columns (the seat's id) before the MLP head of ``hidden_sizes``.
Plain tensor ops only: a population runs it under ``torch.func.vmap`` as it runs an MLP.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from fastppo.envs.layout import ObservationLayout
from fastppo.errors import FastPPOError
from fastppo.policies.distributions import layer_init


@dataclass(frozen=True)
class BoardColumns:
    """Where a board lies in a flat row of ``width`` columns: from column ``start``, ``shape``
    (height, width, planes) laid out planes-last, or planes-first with ``planes_first``."""

    width: int
    start: int
    shape: tuple[int, int, int]
    planes_first: bool = False

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def others(self) -> int:
        """The row's columns that are not the board (a state before it, the seat's id after it)."""
        return self.width - self.size


def board_columns(space: gym.Space, layout: ObservationLayout, start: int) -> BoardColumns:
    """The board in rows of ``space``: the one ``layout`` names, from column ``start`` (the
    actor's rows skip the critic's state, the critic's do not), or a gymnasium observation of
    three dimensions, height x width x planes; a FastPPOError for any other observation."""
    assert isinstance(space, gym.spaces.Box)  # make_encoder refuses any other
    width = int(np.prod(space.shape))
    if layout.board:
        height, columns, planes = layout.board
        return BoardColumns(width, start, (height, columns, planes), layout.board_planes_first)
    if len(space.shape) == 3:
        height, columns, planes = space.shape
        return BoardColumns(width, 0, (int(height), int(columns), int(planes)))
    raise FastPPOError(
        f"--policy.encoder board reads observations that are boards (height x width x planes), and these are "
        f"flat (shape {tuple(space.shape)}): use --policy.encoder mlp"
    )


class ResidualBlock(nn.Module):
    """relu(x + conv(relu(conv(x)))), two 3x3 convolutions that keep the board's size."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = layer_init(nn.Conv2d(channels, channels, 3, padding=1), gain=np.sqrt(2))
        self.conv2 = layer_init(nn.Conv2d(channels, channels, 3, padding=1), gain=np.sqrt(2))

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(x + self.conv2(torch.relu(self.conv1(x))))


class BoardEncoder(nn.Module):
    """[B, width] rows -> [B, out_features]: the board's tower, joined with the row's other
    columns, through ``head`` (an MLP over ``tower_features + columns.others`` inputs, or
    ``nn.Identity``) whose output has ``out_features`` features (module docstring)."""

    def __init__(self, columns: BoardColumns, channels: int, blocks: int, head: nn.Module, out_features: int):
        super().__init__()
        self.columns = columns
        self.stem = layer_init(nn.Conv2d(columns.shape[2], channels, 3, padding=1), gain=np.sqrt(2))
        self.blocks = nn.Sequential(*[ResidualBlock(channels) for _ in range(blocks)])
        self.head = head
        self.out_features = out_features

    @staticmethod
    def tower_features(columns: BoardColumns, channels: int) -> int:
        """How many features the tower gives a head: ``channels`` per cell of the board."""
        height, width, _ = columns.shape
        return channels * height * width

    def forward(self, obs: Tensor) -> Tensor:
        rows = obs.flatten(1).float()
        start, end = self.columns.start, self.columns.start + self.columns.size
        height, width, planes = self.columns.shape
        if self.columns.planes_first:
            board = rows[:, start:end].reshape(-1, planes, height, width)
        else:
            board = rows[:, start:end].reshape(-1, height, width, planes).permute(0, 3, 1, 2)
        tower = self.blocks(torch.relu(self.stem(board))).flatten(1)
        return self.head(torch.cat([rows[:, :start], tower, rows[:, end:]], dim=1))
