"""ONNX export of the deterministic policy, observation normalisation folded in.

The exported graph maps a batch of raw observations ``obs`` [B, *obs_shape] to the actions the
agent takes with ``deterministic=True`` (the mode of its action distribution), clipped to the
action bounds for Box spaces, as the env would clip them. Action masks are not exported.

    fastppo export runs/CartPole-v1__ppo__1__1700000000 --onnx cartpole.onnx
    session = onnxruntime.InferenceSession("cartpole.onnx")
    actions = session.run(["action"], {"obs": observations.astype(np.float32)})[0]
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import os
import warnings
from pathlib import Path
from typing import cast

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from fastppo.agents.agent import Agent, load_agent
from fastppo.errors import FastPPOError, install_extra
from fastppo.files.outputs import output_file, writing
from fastppo.policies import ActorCritic
from fastppo.policies.cnn import NatureCNN
from fastppo.policies.distributions import ActionHead


class DeterministicPolicy(nn.Module):
    """normalise -> actor encoder -> action head -> mode (-> clip): ``Agent.act(obs, deterministic=True)``
    as one module without Python-side state, ready for tracing. A recurrent policy's module is
    ``Agent.step``: ``(obs, state) -> (action, next state)``."""

    encoder: nn.Module
    head: ActionHead
    obs_mean: Tensor
    obs_var: Tensor
    action_low: Tensor
    action_high: Tensor

    def __init__(self, agent: Agent, action_space: gym.Space) -> None:
        super().__init__()
        # one ActorCritic: export refuses a policy per agent group before building this
        policy = cast(ActorCritic, copy.deepcopy(agent.policy).cpu().eval())
        for module in policy.modules():  # bf16 is a training setting: ONNX runtimes convolve fp32
            if isinstance(module, NatureCNN):
                module.autocast = False
        self.policy = policy if policy.recurrent else None
        self.encoder = policy.actor_encoder
        self.head = policy.action_head
        obs_rms = agent.obs_rms
        self.normalize = obs_rms is not None
        self.clip_obs = float(agent.config.env.clip_obs)
        # The actor's columns only (a MAPPO critic's global state is not an input); trailing
        # agent-id columns have no statistics (fastppo.envs.layout).
        skip, self.raw = agent.layout.critic_only, agent.layout.raw
        if obs_rms is not None:
            # The same float32 arithmetic as RunningMeanStd.normalize on float32 observations.
            self.register_buffer("obs_mean", obs_rms.mean.detach().cpu().float()[skip:])
            self.register_buffer("obs_var", obs_rms.var.detach().cpu().float()[skip:])
        self.clip_action = isinstance(action_space, gym.spaces.Box)
        if isinstance(action_space, gym.spaces.Box):
            self.register_buffer("action_low", torch.as_tensor(action_space.low, dtype=torch.float32))
            self.register_buffer("action_high", torch.as_tensor(action_space.high, dtype=torch.float32))

    def forward(self, obs: Tensor, state: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor | None]:
        x = obs if obs.dtype == torch.uint8 and not self.normalize else obs.float()
        if self.normalize:
            stats = x[:, : x.shape[1] - self.raw] if self.raw else x
            stats = ((stats - self.obs_mean) / torch.sqrt(self.obs_var + 1e-8)).clamp(-self.clip_obs, self.clip_obs)
            x = torch.cat([stats, x[:, stats.shape[1] :]], dim=1) if self.raw else stats
        if self.policy is None:
            params = self.head(self.encoder(x))
        else:
            assert state is not None  # a recurrent policy's module takes (obs, state)
            params, _, state = self.policy.recurrent_forward(x, state)
        action = self.head.env_action(self.head.mode(params))
        if self.clip_action:
            action = torch.minimum(torch.maximum(action, self.action_low), self.action_high)
        return action if self.policy is None else (action, state)


def _has_onnxscript() -> bool:
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        return False
    return True


def _torch_onnx_export(
    module: nn.Module, examples: dict[str, Tensor], outputs: list[str], path: Path, opset: int, dynamo: bool
) -> None:
    """The torch.export-based exporter (``dynamo``, needs onnxscript), else the TorchScript one
    (deprecated since torch 2.9, still present in 2.13); both with a dynamic batch dimension on
    every input (``examples``, by name) and output."""
    inputs, batch = list(examples), torch.export.Dim("batch")
    # The exporters narrate on stdout, log and warn about their own internals: keep the CLI quiet.
    logs = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript")]
    levels = [log.level for log in logs]
    for log in logs:
        log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if dynamo:
                torch.onnx.export(
                    module, tuple(examples.values()), str(path), dynamo=True, input_names=inputs, output_names=outputs,
                    dynamic_shapes={name: {0: batch} for name in inputs}, opset_version=opset, external_data=False,
                )  # fmt: skip
            else:
                torch.onnx.export(
                    module, tuple(examples.values()), str(path), dynamo=False, input_names=inputs, output_names=outputs,
                    dynamic_axes={name: {0: "batch"} for name in inputs + outputs}, opset_version=opset,
                )  # fmt: skip
    finally:
        for log, level in zip(logs, levels):
            log.setLevel(level)


def export_onnx(agent: Agent | str | Path, path: str | Path, opset: int = 18) -> Path:
    """Write ``agent``'s deterministic policy to ``path`` (dynamic batch size); returns the path."""
    try:
        import onnx
    except ImportError:
        raise FastPPOError(f"ONNX export needs onnx and onnxscript: {install_extra('export')}") from None
    dynamo = _has_onnxscript()
    # What each exporter writes correctly, found by exporting every action head at every opset and
    # running it in onnxruntime (torch 2.13, onnxscript 0.7, onnx 1.23): the torch.export exporter
    # writes 18 and converts, which fails below 15 (keeping 18); the TorchScript one needs 8 and
    # stops at torch's own maximum.
    low, high = (15, onnx.defs.onnx_opset_version()) if dynamo else (8, torch.onnx._constants.ONNX_MAX_OPSET)
    if not low <= opset <= high:
        exporter = "torch.export" if dynamo else "TorchScript"
        raise FastPPOError(
            f"--opset {opset} is outside what the {exporter} ONNX exporter writes correctly: pick {low} to "
            f"{high} (default 18)"
        )
    agent = agent if isinstance(agent, Agent) else load_agent(agent)
    path = output_file(path, "the ONNX file")
    if agent.layout.groups:
        raise FastPPOError(
            "ONNX export of one policy per agent group is not supported yet: export an agent trained with "
            "--multi-agent.policies shared"
        )
    if agent.policy.recurrent and agent.layout.critic_only:
        raise FastPPOError(
            "ONNX export of a recurrent MAPPO policy is not supported (its state holds the centralised "
            "critic's): export an IPPO or feed-forward agent"
        )
    action_space = agent.action_space
    obs_space = agent.layout.actor_space(
        agent.observation_space
    )  # multi-agent: the agent's observation and its id, no global state
    module = DeterministicPolicy(agent, action_space)
    dtype = torch.uint8 if obs_space.dtype == np.uint8 else torch.float32
    examples = {"obs": torch.as_tensor(np.stack([obs_space.sample(), obs_space.sample()]), dtype=dtype)}
    outputs = ["action"]
    if agent.policy.recurrent:  # Agent.step: the state goes in and comes out
        examples["state"], outputs = torch.randn(2, agent.policy.state_size), ["action", "state_out"]
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        _torch_onnx_export(module, examples, outputs, tmp, opset, dynamo)
        model = onnx.load(str(tmp))
        # An exporter that cannot convert to the opset may log the failure and keep its own.
        written = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        if written != opset:
            raise FastPPOError(
                f"the ONNX exporter wrote opset {written}, not the requested {opset}: export with the default "
                "--opset 18"
            )
        meta = {
            "producer": "fastppo",
            "env_id": agent.config.env.env_id,
            "observation_space": str(obs_space),
            "action_space": str(action_space),
            "deterministic": "true",
            "config": json.dumps(agent.config.to_dict()),
        }
        onnx.helper.set_model_props(model, meta)
        onnx.checker.check_model(model)
        with writing(path, "the ONNX file"):
            onnx.save(model, str(tmp))
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def onnx_signature(path: str | Path) -> str:
    """What an exported file takes and returns, read from the file itself: ``input 'obs'
    [batch, 4], output 'action' [batch]``, and for a recurrent policy its state in and out."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph

    def describe(kind: str, values: list) -> str:
        shapes = [", ".join(d.dim_param or str(d.dim_value) for d in v.type.tensor_type.shape.dim) for v in values]
        return f"{kind}{'s' if len(values) > 1 else ''} " + ", ".join(
            f"'{v.name}' [{shape}]" for v, shape in zip(values, shapes)
        )

    return f"{describe('input', list(graph.input))}; {describe('output', list(graph.output))}"
