"""CleanRL-style IPPO with parameter sharing on a PettingZoo Parallel env: the reference of
``multi_agent.py``. One file, plain PyTorch, its own loop and no fastppo import, written after
CleanRL's ppo.py (https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/ppo.py): the same Args,
``layer_init``, Agent (separate 64-64 tanh actor and critic, orthogonal init), rollout, GAE
and clipped update, with the multi-agent parts added:

- **Rows.** ``num_envs`` copies of the env give one row per agent each (copy-major), so a step
  is ``num_envs * num_agents`` rows of one policy shared by all agents; each row is the agent's
  observation with its one-hot id appended (parameter sharing, Yu et al. 2022; CleanRL's
  ppo_pettingzoo_ma_atari.py shares one policy through SuperSuit instead).
- **Different spaces** (``--pad``): smaller observations are zero-padded to the largest, and
  Discrete action spaces become the largest one with each agent's missing actions masked
  (logits -inf), as MAPPO's code pads simple_speaker_listener.
- **Episodes.** A copy resets in the step its agents finish (SuperSuit's / gymnasium 0.x's
  same-step autoreset), and, as ppo.py does, ``done = terminated or truncated``: no bootstrap at
  a truncation. ``global_step`` counts env steps of the copies (one moves every agent); the
  logged return is the team return, the sum of the agents' episode returns.
  ``--bootstrap-truncation`` (off by default; not in ppo.py) adds ``gamma * V(final
  observation)`` to a truncated step's reward, as Stable-Baselines3 does: a diagnostic.
- **Observation normalisation** (``--normalize-obs``): a running mean/std of the observations
  (ids left out), updated per step and clipped to +-10, as gymnasium's NormalizeObservation
  in CleanRL's ppo_continuous_action.py.

Not in it: agents that finish before their team (every agent must act until its copy's episode
ends, as in MPE), centralised critics (MAPPO), continuous actions, TensorBoard.

    python reference_ippo.py --env-id mpe2.simple_spread_v3 --env-kwargs '{"max_cycles": 25}' --seed 1

The last line printed is ``RESULT {json}``: steps, wall and CPU seconds from building the envs to
the end, SPS, and every finished episode as ``[global_step, team_return]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import random
import time
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions.categorical import Categorical


@dataclass
class Args:
    seed: int = 1
    """seed of the experiment"""
    torch_deterministic: bool = True
    """if toggled, `torch.backends.cudnn.deterministic=False`"""
    torch_threads: int = 1
    """intra-op threads (1, as fastppo's default, is fastest for 64-unit MLPs on a few cores)"""
    quiet: bool = False
    """print only the final RESULT line"""

    # Algorithm specific arguments
    env_id: str = "mpe2.simple_spread_v3"
    """the PettingZoo module whose parallel_env(**env_kwargs) builds the env"""
    env_kwargs: dict = field(default_factory=lambda: {"max_cycles": 25})
    """keyword arguments of parallel_env, as JSON"""
    pad: bool = False
    """zero-pad observations and mask missing actions of agents with different spaces"""
    normalize_obs: bool = False
    """normalise observations by a running mean/std"""
    bootstrap_truncation: bool = False
    """not in ppo.py: add gamma * V(final observation) to the reward of a truncated step, as SB3 does"""
    total_timesteps: int = 150_000
    """total env steps of the copies"""
    learning_rate: float = 7e-4
    """the learning rate of the optimizer"""
    num_envs: int = 8
    """the number of parallel env copies"""
    num_steps: int = 100
    """the number of steps to run in each copy per policy rollout"""
    anneal_lr: bool = False
    """Toggle learning rate annealing for policy and value networks"""
    gamma: float = 0.99
    """the discount factor gamma"""
    gae_lambda: float = 0.95
    """the lambda for the general advantage estimation"""
    num_minibatches: int = 2
    """the number of mini-batches"""
    update_epochs: int = 10
    """the K epochs to update the policy"""
    norm_adv: bool = True
    """Toggles advantages normalization"""
    clip_coef: float = 0.2
    """the surrogate clipping coefficient"""
    clip_vloss: bool = True
    """Toggles whether or not to use a clipped loss for the value function, as per the paper."""
    ent_coef: float = 0.01
    """coefficient of the entropy"""
    vf_coef: float = 0.5
    """coefficient of the value function"""
    max_grad_norm: float = 0.5
    """the maximum norm for the gradient clipping"""
    target_kl: float | None = None
    """the target KL divergence threshold"""

    # to be filled in runtime
    batch_size: int = 0
    """the batch size, in rows (computed in runtime)"""
    minibatch_size: int = 0
    """the mini-batch size, in rows (computed in runtime)"""
    num_iterations: int = 0
    """the number of iterations (computed in runtime)"""


def parse_args() -> Args:
    """Args from the command line (CleanRL uses tyro; argparse keeps this file dependency-free)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if f.type in ("bool", bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        elif f.name == "env_kwargs":
            parser.add_argument(flag, type=json.loads, default=default)
        elif f.name == "target_kl":
            parser.add_argument(flag, type=float, default=default)
        else:
            parser.add_argument(flag, type=type(default), default=default)
    return Args(**vars(parser.parse_args()))


class RunningMeanStd:
    """Running mean and variance (Chan et al.'s parallel update), as gymnasium's."""

    def __init__(self, shape: tuple[int, ...], epsilon: float = 1e-4):
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = epsilon

    def update(self, x: np.ndarray) -> None:
        batch_mean, batch_var, batch_count = x.mean(0), x.var(0), x.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        self.var = m2 / total
        self.count = total


class ParallelCopies:
    """``num_envs`` copies of a PettingZoo ParallelEnv as ``num_envs * num_agents`` rows."""

    def __init__(self, args: Args):
        module = importlib.import_module(args.env_id)
        self.envs = [module.parallel_env(**args.env_kwargs) for _ in range(args.num_envs)]
        env = self.envs[0]
        self.agents = list(env.possible_agents)
        n = len(self.agents)
        obs_sizes = [int(np.prod(env.observation_space(a).shape)) for a in self.agents]
        action_spaces = [env.action_space(a) for a in self.agents]
        assert all(isinstance(s, gym.spaces.Discrete) for s in action_spaces), "discrete actions only"
        counts = [int(s.n) for s in action_spaces]
        if not args.pad:
            assert len(set(obs_sizes)) == 1 and len(set(counts)) == 1, "agents' spaces differ: use --pad"
        self.obs_size, self.num_actions = max(obs_sizes), max(counts)
        self.row_size = self.obs_size + n  # observation | one-hot id
        self.num_rows = args.num_envs * n
        # Which actions each row may take (all but an agent's padding actions).
        self.action_mask = np.tile(
            np.arange(self.num_actions)[None, :] < np.asarray(counts)[:, None], (args.num_envs, 1)
        )
        self.obs = np.zeros((args.num_envs, n, self.row_size), np.float32)
        self.obs[:, :, self.obs_size :] = np.eye(n, dtype=np.float32)
        self.team_returns = np.zeros(args.num_envs)

    def _write(self, c: int, observations: dict) -> None:
        for i, agent in enumerate(self.agents):
            o = observations[agent]
            self.obs[c, i, : o.shape[0]] = o

    def reset(self, seed: int) -> np.ndarray:
        for c, env in enumerate(self.envs):
            observations, _ = env.reset(seed=seed + c)
            self._write(c, observations)
        return self.obs.reshape(self.num_rows, -1).copy()

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float], np.ndarray, np.ndarray]:
        """(next rows, rewards, dones, team returns of the episodes that ended, which rows were
        truncated, and the final observations of the rows whose episode ended)."""
        n = len(self.agents)
        actions = actions.reshape(len(self.envs), n)
        rewards = np.zeros((len(self.envs), n), np.float32)
        dones = np.zeros((len(self.envs), n), np.float32)
        truncated = np.zeros((len(self.envs), n), bool)
        final_obs = None
        finished = []
        for c, env in enumerate(self.envs):
            observations, rew, terms, truncs, _ = env.step(
                {agent: int(actions[c, i]) for i, agent in enumerate(self.agents)}
            )
            for i, agent in enumerate(self.agents):
                rewards[c, i] = rew[agent]
                dones[c, i] = terms[agent] or truncs[agent]
                truncated[c, i] = truncs[agent] and not terms[agent]
            self.team_returns[c] += rewards[c].sum()
            if not env.agents:  # the episode ended: reset now, the next row is a first observation
                assert dones[c].all(), "every agent must act until its copy's episode ends"
                finished.append(float(self.team_returns[c]))
                self.team_returns[c] = 0.0
                self._write(c, observations)
                final_obs = self.obs.copy() if final_obs is None else final_obs
                final_obs[c] = self.obs[c]
                observations, _ = env.reset()
            else:
                assert not dones[c].any(), "an agent finished before its team: not supported"
            self._write(c, observations)
        final = None if final_obs is None else final_obs.reshape(self.num_rows, -1)
        return (
            self.obs.reshape(self.num_rows, -1).copy(),
            rewards.ravel(),
            dones.ravel(),
            finished,
            truncated.ravel(),
            final,
        )


ROOT_2 = np.sqrt(2)  # CleanRL's orthogonal gain for hidden layers


def layer_init(layer, std=ROOT_2, bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, row_size: int, num_actions: int):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(row_size, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(row_size, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, num_actions), std=0.01),
        )

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, mask, action=None):
        logits = self.actor(x).masked_fill(~mask, -1e8)  # padding actions are never taken
        probs = Categorical(logits=logits)
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


if __name__ == "__main__":
    args = parse_args()

    # TRY NOT TO MODIFY: seeding
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = args.torch_deterministic
    torch.set_num_threads(args.torch_threads)
    device = torch.device("cpu")

    start_time, start_cpu = time.time(), time.process_time()
    # env setup
    envs = ParallelCopies(args)
    rows = envs.num_rows
    args.batch_size = rows * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    args.num_iterations = args.total_timesteps // (args.num_envs * args.num_steps)

    agent = Agent(envs.row_size, envs.num_actions).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    obs_rms = RunningMeanStd((envs.obs_size,)) if args.normalize_obs else None

    def normalize(raw: np.ndarray, update: bool = True) -> torch.Tensor:
        if obs_rms is not None:
            raw = raw.copy()
            if update:
                obs_rms.update(raw[:, : envs.obs_size])
            raw[:, : envs.obs_size] = np.clip(
                (raw[:, : envs.obs_size] - obs_rms.mean) / np.sqrt(obs_rms.var + 1e-8), -10, 10
            )
        return torch.tensor(raw, dtype=torch.float32, device=device)

    # ALGO Logic: Storage setup
    obs = torch.zeros((args.num_steps, rows, envs.row_size)).to(device)
    actions = torch.zeros((args.num_steps, rows)).to(device)
    logprobs = torch.zeros((args.num_steps, rows)).to(device)
    rewards = torch.zeros((args.num_steps, rows)).to(device)
    dones = torch.zeros((args.num_steps, rows)).to(device)
    values = torch.zeros((args.num_steps, rows)).to(device)
    action_mask = torch.as_tensor(envs.action_mask, device=device)
    b_masks = action_mask.repeat(args.num_steps, 1)

    # TRY NOT TO MODIFY: start the game
    global_step = 0
    episodes: list[list[float]] = []
    next_obs = normalize(envs.reset(seed=args.seed))
    next_done = torch.zeros(rows).to(device)

    for iteration in range(1, args.num_iterations + 1):
        # Annealing the rate if instructed to do so.
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / args.num_iterations
            lrnow = frac * args.learning_rate
            optimizer.param_groups[0]["lr"] = lrnow

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            # ALGO LOGIC: action logic
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs, action_mask)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            # TRY NOT TO MODIFY: execute the game and log data.
            raw_obs, reward, next_done, finished, truncated, final_obs = envs.step(action.cpu().numpy())
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            if args.bootstrap_truncation and truncated.any():
                with torch.no_grad():
                    final_values = agent.get_value(normalize(final_obs, update=False)).flatten()
                rewards[step] += (
                    args.gamma * final_values * torch.as_tensor(truncated, dtype=torch.float32, device=device)
                )
            next_obs, next_done = normalize(raw_obs), torch.Tensor(next_done).to(device)
            for team_return in finished:
                episodes.append([global_step, team_return])
            if finished and not args.quiet and iteration % 10 == 0 and step == args.num_steps - 1:
                print(f"global_step={global_step}, episodic_return={np.mean(finished):.2f}")

        # bootstrap value if not done
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards).to(device)
            lastgaelam = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        # flatten the batch
        b_obs = obs.reshape((-1, envs.row_size))
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape(-1)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # Optimizing the policy and value network
        b_inds = np.arange(args.batch_size)
        clipfracs = []
        for _epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, args.batch_size, args.minibatch_size):
                end = start + args.minibatch_size
                mb_inds = b_inds[start:end]

                _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                    b_obs[mb_inds], b_masks[mb_inds], b_actions.long()[mb_inds]
                )
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()

                with torch.no_grad():
                    # calculate approx_kl http://joschu.net/blog/kl-approx.html
                    old_approx_kl = (-logratio).mean()
                    approx_kl = ((ratio - 1) - logratio).mean()
                    clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                # Policy loss
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                # Value loss
                newvalue = newvalue.view(-1)
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(
                        newvalue - b_values[mb_inds],
                        -args.clip_coef,
                        args.clip_coef,
                    )
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss_max = torch.max(v_loss_unclipped, v_loss_clipped)
                    v_loss = 0.5 * v_loss_max.mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                entropy_loss = entropy.mean()
                loss = pg_loss - args.ent_coef * entropy_loss + v_loss * args.vf_coef

                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        if not args.quiet and iteration % 10 == 0:
            print(
                f"iteration={iteration}, SPS={int(global_step / (time.time() - start_time))}, "
                f"approx_kl={approx_kl.item():.4f}"
            )

    wall, cpu = time.time() - start_time, time.process_time() - start_cpu
    print(
        "RESULT "
        + json.dumps(
            {"steps": global_step, "wall_s": wall, "cpu_s": cpu, "sps": global_step / wall, "episodes": episodes}
        )
    )
