"""Shortcuts for mpe2's MPE envs as their modules build them: PettingZoo's parallel API, the same
values, less Python per step.

``mpe2.<task>.parallel_env()`` is PettingZoo's AEC-to-parallel conversion over
``OrderEnforcingWrapper`` over a bounds wrapper (``AssertOutOfBoundsWrapper`` for discrete
actions, ``ClipOutOfBoundsWrapper`` for continuous ones) over mpe2's ``SimpleEnv``. The conversion
steps the agents one at a time through both wrappers, whose every attribute read is forwarded by
``__getattr__``, and computes each agent's observation with ``last()`` before its turn only to
throw it away: half of simple_spread's step time. ``SimpleEnv.observe`` and ``state`` call the
scenario's ``observation`` (pure in every mpe2 scenario), so neither shortcut changes a value.

simple_spread (the MPE task most papers report) goes further: ``step_spread`` computes the world
step, rewards and observations of all copies at once with numpy, the same operations in the same
order as mpe2's per-entity Python (so the same float64 values, bit for bit), for every step that
does not end an episode; the last step of an episode and the resets still run mpe2's own code.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

Step = tuple[dict[str, Any], dict[str, float], dict[str, bool], dict[str, bool], dict[str, Any]]


def simple_env(env: Any) -> Any | None:
    """The mpe2 ``SimpleEnv`` inside ``env`` when ``env`` is exactly what an mpe2 module's
    ``parallel_env`` builds and its ``observe`` is mpe2's; None for anything else."""
    try:
        from mpe2._mpe_utils.simple_env import SimpleEnv
        from pettingzoo.utils.conversions import aec_to_parallel_wrapper
        from pettingzoo.utils.wrappers import AssertOutOfBoundsWrapper, ClipOutOfBoundsWrapper, OrderEnforcingWrapper
    except ImportError:
        return None
    if type(env) is not aec_to_parallel_wrapper or type(env.aec_env) is not OrderEnforcingWrapper:
        return None
    bounds = env.aec_env.env
    if type(bounds) not in (AssertOutOfBoundsWrapper, ClipOutOfBoundsWrapper):
        return None
    inner = bounds.env
    return inner if isinstance(inner, SimpleEnv) and type(inner).observe is SimpleEnv.observe else None


def state_is_observations(env: Any) -> bool:
    """Whether ``env.state()`` is, by construction, its agents' observations concatenated in
    ``possible_agents`` order (mpe2's ``SimpleEnv.state``, not overridden)."""
    inner = simple_env(env)
    if inner is None:
        return False
    from mpe2._mpe_utils.simple_env import SimpleEnv  # importable: simple_env found one

    return type(inner).state is SimpleEnv.state


def parallel_step(env: Any, actions: dict[str, Any]) -> Step:
    """``env.step(actions)`` for an env that ``simple_env`` accepts: the same results and the same
    env state after it (pettingzoo's ``aec_to_parallel_wrapper.step``, line by line), without the
    thrown-away observations and the order-enforcing layer. Each AEC step still goes through the
    bounds wrapper, which checks (discrete) or clips (continuous) the action as before."""
    bounds = env.aec_env.env
    inner = bounds.env
    rewards: defaultdict[str, float] = defaultdict(int)
    for agent in inner.agents:
        bounds.step(actions[agent])
        for other in inner.agents:
            rewards[other] += inner.rewards[other]
    terminations, truncations, infos = dict(inner.terminations), dict(inner.truncations), dict(inner.infos)
    observations = {agent: inner.observe(agent) for agent in inner.agents}
    while inner.agents and (inner.terminations[inner.agent_selection] or inner.truncations[inner.agent_selection]):
        bounds.step(None)  # the finished agents leave, one AEC step each
    env.agents = inner.agents
    return observations, rewards, terminations, truncations, infos


MOVES = np.array([[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]])
"""``action.u`` of each discrete MPE action (no-op, left, right, down, up) before
``SimpleEnv._set_action`` scales it by the agent's sensitivity."""
SENSITIVITY = 5.0  # SimpleEnv._set_action's for agents without their own ``accel``


def spread_env(env: Any) -> Any | None:
    """The mpe2 ``SimpleEnv`` inside ``env`` when ``step_spread`` may step it: mpe2's own
    simple_spread with discrete actions, full observations, no early end, no benchmark data, and
    its world as the scenario builds it (silent movable agents that collide, without motor noise,
    own acceleration or speed limit; landmarks that neither move nor collide); None otherwise."""
    inner = simple_env(env)
    try:
        from mpe2.simple_spread.simple_spread import ExtendedWorld, Scenario, raw_env
    except ImportError:
        return None
    if type(inner) is not raw_env or type(inner.scenario) is not Scenario or type(inner.world) is not ExtendedWorld:
        return None
    scenario, world = inner.scenario, inner.world
    settings = not inner.continuous_actions and not inner.benchmark_data and inner.local_ratio is not None and not scenario.terminate_on_success
    full_view = scenario.num_agent_neighbors is None and scenario.num_landmark_neighbors is None
    agents = all(a.movable and a.collide and a.silent and not a.u_noise and a.accel is None and a.max_speed is None and a.action_callback is None for a in world.agents)
    landmarks = all(not lm.movable and not lm.collide for lm in world.landmarks)
    return inner if settings and full_view and agents and landmarks else None


def step_spread(inners: list[Any], actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One step of simple_spread copies (``spread_env``'s, every agent playing, none at its last
    step) with discrete ``actions`` [copies, agents]: their observations [copies, agents, size]
    (float32) and rewards [copies, agents] (float64), the values ``parallel_step`` returns, and
    each copy left in the state its own step leaves (positions, velocities, AEC bookkeeping).

    Each line mirrors mpe2 (``SimpleEnv._execute_world_step``, ``World.step``,
    ``Scenario.reward``/``global_reward``/``observation``) with a leading copies axis; sums over
    entities keep mpe2's order, since float addition is not associative."""
    world = inners[0].world
    n = len(world.agents)
    pos = np.array([[e.state.p_pos for e in inner.world.agents + inner.world.landmarks] for inner in inners])
    vel = np.array([[a.state.p_vel for a in inner.world.agents] for inner in inners])
    agents, landmarks = pos[:, :n], pos[:, n:]
    # apply_action_force, then apply_environment_force over the pairs a < b (only agents collide)
    force = MOVES[actions] * SENSITIVITY
    k = world.contact_margin
    for a in range(n):
        for b in range(a + 1, n):
            delta = agents[:, a] - agents[:, b]
            dist = np.sqrt(np.sum(np.square(delta), axis=-1))[:, None]
            penetration = np.logaddexp(0, -(dist - (world.agents[a].size + world.agents[b].size)) / k) * k
            pushed = world.contact_force * delta / dist * penetration
            force[:, a] = pushed + force[:, a]
            force[:, b] = -pushed + force[:, b]
    # integrate_state
    mass = np.array([a.mass for a in world.agents])[:, None]
    agents = agents + vel * world.dt
    vel = vel * (1 - world.damping) + (force / mass) * world.dt
    # rewards: the team's (every landmark's closest agent) mixed with each agent's collisions
    team = np.zeros(len(inners))
    for lm in range(landmarks.shape[1]):
        team = team - np.sqrt(np.sum(np.square(agents - landmarks[:, lm, None]), axis=-1)).min(axis=1)
    scenario = inners[0].scenario
    penalised = not scenario.curriculum or scenario.CURRICULUM_STAGES[scenario.curriculum_stage]["collision_penalty"]
    sizes = np.array([a.size for a in world.agents])
    apart = np.sqrt(np.sum(np.square(agents[:, :, None] - agents[:, None, :]), axis=-1))
    collisions = ((apart < sizes[:, None] + sizes[None, :]) & ~np.eye(n, dtype=bool)).sum(axis=2)
    own = 0.0 - collisions if penalised else np.zeros((len(inners), n))
    ratio = inners[0].local_ratio
    rewards = team[:, None] * (1 - ratio) + own * ratio
    # observation: [own velocity, own position, landmarks - own, other agents - own, their (silent) comms]
    others = ~np.eye(n, dtype=bool)
    landmark_offsets = landmarks[:, None] - agents[:, :, None]
    agent_offsets = (agents[:, None] - agents[:, :, None])[:, others].reshape(len(inners), n, n - 1, 2)
    comms = np.zeros((len(inners), n, (n - 1) * world.dim_c))
    observations = np.concatenate([vel, agents, landmark_offsets.reshape(len(inners), n, -1), agent_offsets.reshape(len(inners), n, -1), comms], axis=2)
    for c, inner in enumerate(inners):
        for i, agent in enumerate(inner.world.agents):
            agent.state.p_pos, agent.state.p_vel = agents[c, i], vel[c, i]
        inner.current_actions = list(actions[c])
        inner.rewards = dict(zip(inner.rewards, rewards[c].tolist()))
        inner._cumulative_rewards = dict(inner.rewards)
        inner.steps += 1
    return observations.astype(np.float32), rewards
