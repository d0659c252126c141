"""Shortcuts for mpe2's MPE envs as their modules build them: PettingZoo's parallel API, the same
values, less Python per step.

``mpe2.<task>.parallel_env()`` is PettingZoo's AEC-to-parallel conversion over
``OrderEnforcingWrapper`` over a bounds wrapper (``AssertOutOfBoundsWrapper`` for discrete
actions, ``ClipOutOfBoundsWrapper`` for continuous ones) over mpe2's ``SimpleEnv``. The conversion
steps the agents one at a time through both wrappers, whose every attribute read is forwarded by
``__getattr__``, and computes each agent's observation with ``last()`` before its turn only to
throw it away: half of simple_spread's step time. ``SimpleEnv.observe`` and ``state`` call the
scenario's ``observation`` (pure in every mpe2 scenario), so neither shortcut changes a value.

On simple_spread and simple_speaker_listener ``BatchedWorlds`` goes further: it computes the world
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
"""``action.u`` of each discrete MPE move (no-op, left, right, down, up) before
``SimpleEnv._set_action`` scales it by the agent's sensitivity."""
SENSITIVITY = 5.0  # SimpleEnv._set_action's for agents without their own ``accel``


class Copies:
    """The world state of several copies after a step's physics, with a leading copies axis:
    ``vel`` [copies, agents, 2], ``agents``' and ``landmarks``' positions [copies, ., 2] and the
    agents' messages ``comm`` [copies, agents, dim_c]; ``worlds`` holds their tasks' constants."""

    def __init__(self, worlds: BatchedWorlds, inners: list[Any], pos: np.ndarray, vel: np.ndarray, comm: np.ndarray):
        self.worlds, self.inners, self.vel, self.comm = worlds, inners, vel, comm
        self.agents, self.landmarks = pos[:, : worlds.n], pos[:, worlds.n :]


def distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """mpe2's ``np.sqrt(np.sum(np.square(a - b)))`` over the last axis (2 values: one order)."""
    return np.sqrt(np.square(a - b).sum(axis=-1))


class Spread:
    """simple_spread's rewards and observations (``mpe2.simple_spread.simple_spread.Scenario``)."""

    @staticmethod
    def accepts(inner: Any) -> bool:
        scenario = inner.scenario
        silent = all(agent.silent for agent in inner.world.agents)
        return (
            silent
            and scenario.num_agent_neighbors is None
            and scenario.num_landmark_neighbors is None
            and not scenario.terminate_on_success
        )

    @staticmethod
    def global_reward(world: Copies) -> np.ndarray:
        """Minus the sum over landmarks of the closest agent's distance (summed in landmark order)."""
        closest = distances(world.agents[:, :, None], world.landmarks[:, None]).min(axis=1)
        team = np.zeros(len(world.inners))
        for lm in range(closest.shape[1]):
            team = team - closest[:, lm]
        return team

    @staticmethod
    def rewards(world: Copies) -> np.ndarray:
        """Minus each agent's collisions with the others (none in curriculum stage 0, which the
        scenario may leave during a run: read at every step)."""
        scenario, worlds = world.inners[0].scenario, world.worlds
        if scenario.curriculum and not scenario.CURRICULUM_STAGES[scenario.curriculum_stage]["collision_penalty"]:
            return np.zeros((len(world.inners), worlds.n))
        touching = distances(world.agents[:, :, None], world.agents[:, None, :]) < worlds.reach
        return 0.0 - (touching & worlds.others).sum(axis=2)

    @staticmethod
    def observations(world: Copies) -> list[np.ndarray]:
        """[own velocity, own position, landmarks - own, other agents - own, their (silent) messages]."""
        n, copies, others = world.worlds.n, len(world.inners), world.worlds.others
        landmarks = (world.landmarks[:, None] - world.agents[:, :, None]).reshape(copies, n, -1)
        agents = (world.agents[:, None] - world.agents[:, :, None])[:, others].reshape(copies, n, -1)
        comms = np.zeros((copies, n, (n - 1) * world.comm.shape[2]))  # the others' messages: silent agents
        return list(
            np.concatenate([world.vel, world.agents, landmarks, agents, comms], axis=2)
            .astype(np.float32)
            .transpose(1, 0, 2)
        )


class SpeakerListener:
    """simple_speaker_listener's rewards and observations: agent 0 speaks, agent 1 listens and moves."""

    @staticmethod
    def accepts(inner: Any) -> bool:
        speaker, listener = inner.world.agents
        return not speaker.movable and not speaker.silent and listener.movable and listener.silent

    @staticmethod
    def goals(world: Copies) -> list[Any]:
        return [inner.world.agents[0].goal_b for inner in world.inners]

    @classmethod
    def rewards(cls, world: Copies) -> np.ndarray:
        """Both: minus the listener's squared distance to the goal landmark."""
        goal = [inner.world.landmarks.index(landmark) for inner, landmark in zip(world.inners, cls.goals(world))]
        dist2 = np.square(world.agents[:, 1] - world.landmarks[np.arange(len(goal)), goal]).sum(axis=-1)
        return np.repeat(-dist2[:, None], 2, axis=1)

    @classmethod
    def observations(cls, world: Copies) -> list[np.ndarray]:
        """The speaker: its goal's colour; the listener: [velocity, landmarks - own, speaker's message]."""
        colours = np.array([landmark.color for landmark in cls.goals(world)], dtype=np.float64)
        landmarks = (world.landmarks - world.agents[:, 1, None]).reshape(len(world.inners), -1)
        return [
            colours.astype(np.float32),
            np.concatenate([world.vel[:, 1], landmarks, world.comm[:, 0]], axis=1).astype(np.float32),
        ]


ScenarioSteps = type[Spread] | type[SpeakerListener]
"""A task's rewards and observations over copies; only simple_spread's weighs a global reward
(``Spread.global_reward``: the one task with a ``local_ratio``)."""


def scenario_steps(inner: Any) -> ScenarioSteps | None:
    """``Spread`` or ``SpeakerListener`` for the scenario of an mpe2 ``SimpleEnv``, else None."""
    import mpe2.simple_speaker_listener.simple_speaker_listener as speaker_listener
    import mpe2.simple_spread.simple_spread as spread

    for module, steps in ((spread, Spread), (speaker_listener, SpeakerListener)):
        if (
            type(inner) is module.raw_env
            and type(inner.scenario) is module.Scenario
            and type(inner.world) is module.ExtendedWorld
        ):
            return steps if steps.accepts(inner) else None
    return None


def batched_env(env: Any) -> Any | None:
    """The mpe2 ``SimpleEnv`` inside ``env`` when ``BatchedWorlds`` may step it: simple_spread
    (full observations, no early end) or simple_speaker_listener as their modules build them, with
    discrete actions and no benchmark data, in a world whose physics ``BatchedWorlds.step`` mirrors
    (agents without scripts, noise or speed limit; landmarks that neither move nor collide);
    None otherwise."""
    inner = simple_env(env)
    if inner is None or inner.continuous_actions or inner.benchmark_data or scenario_steps(inner) is None:
        return None
    agents = all(
        a.action_callback is None and not a.u_noise and not a.c_noise and a.max_speed is None
        for a in inner.world.agents
    )
    return inner if agents and all(not lm.movable and not lm.collide for lm in inner.world.landmarks) else None


class BatchedWorlds:
    """The copies of one MPE task (``batched_env``'s, built alike by one module and its kwargs)
    that ``step`` advances together, with their world's constants read once."""

    def __init__(self, inners: list[Any]):
        self.inners = inners
        scenario = scenario_steps(inners[0])
        assert scenario is not None  # of() takes only copies batched_env accepts, whose task has steps here
        self.scenario = scenario
        world = inners[0].world
        agents = world.agents
        self.n = len(agents)
        self.action_counts = np.array([int(inners[0].action_space(agent.name).n) for agent in agents])
        self.movable = np.array([agent.movable for agent in agents])
        # A slice is a view: no copies.
        self.moving = slice(0, self.n) if self.movable.all() else np.flatnonzero(self.movable)
        self.sensitivity = np.array([SENSITIVITY if agent.accel is None else agent.accel for agent in agents])[:, None]
        self.speaking = np.flatnonzero([not agent.silent for agent in agents])
        self.mass = np.array([agent.mass for agent in agents])[self.moving, None]
        # apply_environment_force's colliding pairs a < b (only agents collide here), in its order
        self.pairs = [
            (a, b) for a in range(self.n) for b in range(a + 1, self.n) if agents[a].collide and agents[b].collide
        ]
        sizes = np.array([agent.size for agent in agents])
        # The distance under which a pair touches (is_collision, contact forces).
        self.reach = sizes[:, None] + sizes[None, :]
        self.others = ~np.eye(self.n, dtype=bool)
        self.dim_c, self.dt, self.damping = world.dim_c, world.dt, world.damping
        self.contact_force, self.contact_margin = world.contact_force, world.contact_margin
        self.local_ratio = inners[0].local_ratio

    @classmethod
    def of(cls, envs: list[Any]) -> BatchedWorlds | None:
        """The copies ``envs`` as one batch, or None unless ``batched_env`` takes every one."""
        inners = [batched_env(env) for env in envs]
        return cls(inners) if all(inner is not None for inner in inners) else None

    def playable(self, actions: np.ndarray) -> np.ndarray:
        """[copies] whether ``step`` may take each copy now: every agent playing an action of its
        own space at a step that does not end the episode (that one, the resets and bad actions
        take mpe2's own step)."""
        valid = ((actions >= 0) & (actions < self.action_counts)).all(axis=1)
        return valid & np.array(
            [inner.steps + 1 < inner.max_cycles and len(inner.agents) == self.n for inner in self.inners]
        )

    def step(self, copies: np.ndarray, actions: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """One step of the copies at indices ``copies`` (``playable``) with discrete ``actions``
        [copies, agents]: each agent's observations [copies, size] (float32) and the rewards
        [copies, agents] (float64), the values ``parallel_step`` returns, and each copy left in the
        state its own step leaves (positions, velocities, messages, AEC bookkeeping).

        Each line mirrors mpe2 (``SimpleEnv._execute_world_step``/``_set_action``, ``World.step``,
        the scenario's rewards and observations) with a leading copies axis; sums over entities
        keep mpe2's order, since float addition is not associative."""
        inners, k = [self.inners[c] for c in copies], len(copies)
        pos = np.array([[e.state.p_pos for e in inner.world.agents + inner.world.landmarks] for inner in inners])
        vel = np.array([[a.state.p_vel for a in inner.world.agents] for inner in inners])
        # _set_action and apply_action_force: a movable agent's action % 5 moves it, the rest
        # (action // 5; all of it for an agent that cannot move) is its message, if it speaks
        force = MOVES[actions % len(MOVES)] * self.sensitivity  # an immovable agent's row is never read
        comm = np.zeros((k, self.n, self.dim_c))
        if self.speaking.size:
            message = np.where(self.movable, actions // len(MOVES), actions)
            comm[np.arange(k)[:, None], self.speaking, message[:, self.speaking]] = 1.0
        # apply_environment_force, pair by pair in mpe2's order
        margin = self.contact_margin
        for a, b in self.pairs:
            delta = pos[:, a] - pos[:, b]
            dist = np.sqrt(np.square(delta).sum(axis=-1))[:, None]
            penetration = np.logaddexp(0, -(dist - self.reach[a, b]) / margin) * margin
            pushed = self.contact_force * delta / dist * penetration
            if self.movable[a]:
                force[:, a] = pushed + force[:, a]
            if self.movable[b]:
                force[:, b] = -pushed + force[:, b]
        # integrate_state
        moving = self.moving
        pos[:, moving] = pos[:, moving] + vel[:, moving] * self.dt
        vel[:, moving] = vel[:, moving] * (1 - self.damping) + (force[:, moving] / self.mass) * self.dt
        state = Copies(self, inners, pos, vel, comm)
        rewards = self.scenario.rewards(state)
        if self.local_ratio is not None:
            assert issubclass(self.scenario, Spread)  # the one task with a local_ratio
            rewards = self.scenario.global_reward(state)[:, None] * (1 - self.local_ratio) + rewards * self.local_ratio
        observations = self.scenario.observations(state)
        for c, inner in enumerate(inners):
            for agent, p, v, message in zip(inner.world.agents, pos[c], vel[c], comm[c]):
                if agent.movable:
                    agent.state.p_pos, agent.state.p_vel = p, v
                if not agent.silent:
                    agent.state.c = message
            inner.current_actions = list(actions[c])
            inner.rewards = dict(zip(inner.rewards, rewards[c].tolist()))
            inner._cumulative_rewards = dict(inner.rewards)
            inner.steps += 1
        return observations, rewards
