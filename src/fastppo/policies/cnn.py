"""The Nature CNN (Mnih et al. 2015), CleanRL ppo_atari.py's trunk: three convolutions and a
512-unit linear layer, orthogonally initialised with gain sqrt(2); optionally computed under bf16
autocast (``--policy.precision bf16``)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from fastppo.errors import FastPPOError
from fastppo.policies.distributions import layer_init


class NatureCNN(nn.Module):
    """[B, C, H, W] frames -> [B, out_features]: C stacked grayscale frames, 4x84x84 for Atari
    (Cx84x84 with --env.frame-stack C).

    uint8 pixels are scaled to [0, 1] here, so the rollout buffer stores 1 byte per pixel.
    Float inputs are taken as already scaled (e.g. by ``env.normalize_obs``) and pass unchanged.

    ``precision`` "bf16": the convolutions and the linear layer run under bf16 autocast (the
    weights stay fp32, the master copy the optimizer steps); the features come out fp32, so the
    heads, the distribution and the losses after them compute in fp32 as before.
    """

    def __init__(self, obs_shape: tuple[int, ...], out_features: int = 512, precision: str = "fp32"):
        super().__init__()
        if len(obs_shape) != 3:
            raise FastPPOError(
                "the cnn encoder needs [channels, height, width] observations, "
                f"got shape {tuple(obs_shape)}: use --policy.encoder mlp"
            )
        channels, height, width = obs_shape
        if min(height, width) < 36:
            raise FastPPOError(
                f"the Nature CNN needs frames of at least 36x36 pixels, got {height}x{width}: "
                "resize them or use --policy.encoder mlp"
            )
        self.convs = nn.Sequential(
            layer_init(nn.Conv2d(channels, 32, 8, stride=4), gain=np.sqrt(2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2), gain=np.sqrt(2)),
            nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1), gain=np.sqrt(2)),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flat = self.convs(torch.zeros(1, *obs_shape)).shape[1]  # 3136 for 84x84
        self.linear = nn.Sequential(layer_init(nn.Linear(n_flat, out_features), gain=np.sqrt(2)), nn.ReLU())
        self.out_features = out_features
        self.autocast = precision == "bf16"

    def forward(self, obs: Tensor) -> Tensor:
        x = obs.float() / 255.0 if obs.dtype == torch.uint8 else obs
        # Channels-last frames take the CPU's faster convolution kernels (a 256-frame minibatch's
        # forward and backward: 0.63-0.71x the time of the default layout on 2 cores); the weights
        # stay in the default layout, which safetensors saves as they are.
        x = x.contiguous(memory_format=torch.channels_last)
        if not self.autocast:
            return self.linear(self.convs(x))
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            features = self.linear(self.convs(x))
        return features.float()
