"""Recurrent cores (LSTM or GRU) between the observation encoder and the heads.

The state of a core is one flat ``[batch, state_size]`` tensor (an LSTM's ``h`` and ``c`` side by
side), so that the rollout cursor, checkpoints and the ONNX graph carry a single tensor whatever
the cell. Episode boundaries are data, as everywhere in fastppo: after a row that is not a real
transition (a NEXT_STEP reset row, whose observation is the last of an episode) the state is
zeroed, so the next episode's first observation starts from zeros. The rollout applies that rule
step by step (:func:`carry`); the update cuts each env's rows into the same episodes
(:class:`Segments`) and runs them side by side, padded to the longest, through nn.LSTM/nn.GRU's
C++ loop (padding rather than a PackedSequence: half the time of the packed run on CPU, and the
padded steps come after each piece's end, so they never touch a real output).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn

from fastppo.policies.mlp_autograd import affine

MemoryKind = Literal["lstm", "gru"]


def carry(state: Tensor, keep: Tensor) -> Tensor:
    """The state the next row starts from: zeros where ``keep`` [B] (the row was a real
    transition) is false."""
    return state * keep.unsqueeze(-1).to(state.dtype)


@dataclass
class Segments:
    """The episode pieces in T x B rows (time-major): a piece starts at row 0 of each env and
    after each row whose ``keep`` is false. ``gather`` [L, P] holds each piece's flat row indices
    padded to the longest piece L (padding repeats the piece's last row and is never read);
    ``scatter`` [T * B] is the inverse, each row's position in the flattened [L * P] padding."""

    gather: Tensor
    scatter: Tensor
    env: Tensor  # [P] the env column of each piece
    continues: Tensor  # [P] true for a piece that starts at row 0 (from the stored state)

    @classmethod
    def from_keep(cls, keep: Tensor) -> Segments:
        """Pieces of a [T, B] keep mask (one host copy of it: the cut points decide shapes)."""
        k = keep.cpu().numpy()
        T, B = k.shape
        starts = np.zeros((T, B), dtype=bool)
        starts[0] = True
        starts[1:] = ~k[:-1]
        env, start = np.nonzero(starts.T)  # pieces sorted by env, then time
        end = np.append(start[1:], T)
        end[np.append(env[1:] != env[:-1], True)] = T  # the last piece of an env runs to T
        lengths = end - start
        offsets = np.arange(lengths.max())[:, None]
        rows = start + np.minimum(offsets, lengths - 1)  # [L, P]
        flat = rows * B + env
        inside = offsets < lengths
        scatter = np.empty(T * B, dtype=np.int64)
        scatter[flat[inside]] = np.nonzero(inside.reshape(-1))[0]
        device = keep.device
        return cls(
            gather=torch.as_tensor(flat, device=device),
            scatter=torch.as_tensor(scatter, device=device),
            env=torch.as_tensor(env, device=device),
            continues=torch.as_tensor(start == 0, device=device),
        )


class RecurrentCore(nn.Module):
    """A one-layer LSTM or GRU with CleanRL's initialisation (orthogonal weights, zero biases)."""

    def __init__(self, kind: MemoryKind, in_features: int, hidden_size: int):
        super().__init__()
        self.kind = kind
        self.hidden_size = hidden_size
        self.rnn = nn.LSTM(in_features, hidden_size) if kind == "lstm" else nn.GRU(in_features, hidden_size)
        for name, param in self.rnn.named_parameters():
            if name.startswith("weight"):
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.zeros_(param)

    @property
    def state_size(self) -> int:
        return 2 * self.hidden_size if self.kind == "lstm" else self.hidden_size

    def _hx(self, state: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        parts = state.unsqueeze(0).split(self.hidden_size, dim=-1)
        return parts[0].contiguous() if self.kind == "gru" else (parts[0].contiguous(), parts[1].contiguous())

    def _state(self, hx: Tensor | tuple[Tensor, Tensor]) -> Tensor:
        return (hx if isinstance(hx, Tensor) else torch.cat(hx, dim=-1)).squeeze(0)  # a GRU's h, an LSTM's (h, c)

    def forward(self, x: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
        """T steps with no episode boundary inside: (outputs [T, B, hidden], final state [B, state_size])."""
        # A rollout step: the bare cell costs under half of nn.LSTM's call on CPU (8 x 128 LSTM: ~100
        # vs ~240 us).
        if x.shape[0] == 1:
            weights = self.weights()
            if self.kind == "gru":
                h = torch.gru_cell(x[0], state, *weights)
                return h.unsqueeze(0), h
            h, c = torch.lstm_cell(x[0], tuple(state.split(self.hidden_size, dim=-1)), *weights)
            return h.unsqueeze(0), torch.cat([h, c], dim=-1)
        out, hx = self.rnn(x, self._hx(state))
        return out, self._state(hx)

    def sequences(self, x: Tensor, state: Tensor, segments: Segments) -> Tensor:
        """Outputs [T * B, hidden] of rows ``x`` [T * B, F] cut into ``segments``: the pieces that
        start at row 0 continue ``state`` [B, state_size], the others start from zeros."""
        first = carry(state[segments.env], segments.continues)
        out = self.rnn(x[segments.gather], self._hx(first))[0]
        return out.reshape(-1, self.hidden_size)[segments.scatter]

    def weights(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """nn.LSTM/nn.GRU's (weight_ih, weight_hh, bias_ih, bias_hh), what ``cell_steps`` takes."""
        rnn = self.rnn
        # nn.RNNBase registers its weights by name, which torch's stubs type as Tensor | Module.
        return rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0  # type: ignore[return-value]

    def cell(self, gi: Tensor, state: Tensor, weight_hh: Tensor, bias_hh: Tensor) -> Tensor:
        """One step of nn.LSTM/nn.GRU's cell (its gate order and formulas) in plain tensor ops:
        ``gi`` [..., B, gates] the input's part (x W_ih^T + b_ih), ``state`` [..., B, state_size];
        returns the next state (LSTM: h, c side by side). One core's ``[B, ...]`` rows with its
        own weights, or a population's ``[M, B, ...]`` with ``[M, gates, hidden]`` weights."""
        hidden = self.hidden_size
        gh = affine(bias_hh, state[..., :hidden], weight_hh)
        if self.kind == "lstm":
            i, f, g, o = (gi + gh).chunk(4, dim=-1)
            c = torch.sigmoid(f) * state[..., hidden:] + torch.sigmoid(i) * torch.tanh(g)
            return torch.cat([torch.sigmoid(o) * torch.tanh(c), c], dim=-1)
        r_i, z_i, n_i = gi.chunk(3, dim=-1)
        r_h, z_h, n_h = gh.chunk(3, dim=-1)
        z = torch.sigmoid(z_i + z_h)
        n = torch.tanh(n_i + torch.sigmoid(r_i + r_h) * n_h)
        return n + z * (state - n)

    def cell_steps(
        self,
        x: Tensor,
        state: Tensor,
        keep: Tensor | None = None,
        weights: tuple[Tensor, ...] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """(outputs [..., T * B, hidden], final state) of rows ``x`` [..., T * B, F] that are T steps
        of B sequences (time-major) from ``state`` [..., B, state_size], stepped cell by cell, the
        state zeroed after each row ``keep`` [..., T * B] marks false (the rule ``Segments`` applies
        by cutting). ``weights`` (``weights()``'s order, default this core's) may be a population's,
        stacked ``[M, ...]`` as ``x`` and ``state`` then are: nn.LSTM's C++ loop takes one weight
        only. A single run keeps nn.LSTM (``forward``, ``sequences``)."""
        weight_ih, weight_hh, bias_ih, bias_hh = weights or self.weights()
        batch = state.shape[-2]
        gi = affine(bias_ih, x, weight_ih)  # every step's input part at once
        keeps = None if keep is None else keep.to(state.dtype).unsqueeze(-1).split(batch, dim=-2)
        steps = []
        for t, gi_t in enumerate(gi.split(batch, dim=-2)):
            state = self.cell(gi_t, state, weight_hh, bias_hh)
            steps.append(state[..., : self.hidden_size])
            if keeps is not None:
                state = state * keeps[t]
        return torch.cat(steps, dim=-2), state
