"""Agents for the games' tests: untrained ones on any game's rows, one for Leduc hold'em whose
preferences are set by hand, and short quiet trainings on Kuhn poker."""

from __future__ import annotations

import torch

import fastppo
from fastppo.agents.agent import Agent, build_agent
from fastppo.agents.agent_rows import PettingZooAgents
from fastppo.config import Config, EnvConfig, MultiAgentConfig
from fastppo.envs.pettingzoo_vec import AgentSpaces
from fastppo.games import leduc_rules
from fastppo.games.game_env import make_game

LEDUC = leduc_rules.LEDUC_ENV_ID
KUHN = "openspiel:kuhn_poker"


def untrained_agent(env_id: str) -> Agent:
    """An untrained agent on the game ``env_id``'s rows as training builds them (AgentSpaces of
    the AEC env), seeded by torch's generator."""
    env = make_game(env_id)
    spaces = AgentSpaces(env, MultiAgentConfig())
    agent = build_agent(
        Config(env=EnvConfig(env_id=env_id)),
        spaces.observation_space,
        spaces.action_space,
        torch.device("cpu"),
        spaces.layout,
    )
    agent.pettingzoo = PettingZooAgents.of(spaces)
    agent.action_masks = True
    return agent


def leduc_agent(prefer_raise: bool = True) -> Agent:
    """An untrained agent of Leduc whose action head prefers to raise (bias 5, weights 0) where
    raising is legal."""
    agent = untrained_agent(LEDUC)
    with torch.no_grad():
        agent.policy.action_head.linear.weight.zero_()
        agent.policy.action_head.linear.bias.copy_(torch.tensor([0.0, 5.0 if prefer_raise else 0.0, 0.0, 0.0]))
    return agent


def trained_on_kuhn(run_dir, seed: int, total_timesteps: int, num_envs: int, learning_rate: float = 1e-3, **flags):
    """An agent trained on Kuhn poker without a progress bar or TensorBoard: rollouts of 32 steps,
    undiscounted (a hand's chips are its return); ``flags`` in fastppo.train's dotted names."""
    return fastppo.train(
        KUHN,
        run_dir=run_dir,
        seed=seed,
        total_timesteps=total_timesteps,
        num_envs=num_envs,
        num_steps=32,
        gamma=1.0,
        learning_rate=learning_rate,
        progress=False,
        tensorboard=False,
        **flags,
    )
