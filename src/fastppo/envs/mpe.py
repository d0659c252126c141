"""Shortcuts for mpe2's MPE envs as their modules build them: PettingZoo's parallel API, the same
values, less Python per step.

``mpe2.<task>.parallel_env()`` is PettingZoo's AEC-to-parallel conversion over
``OrderEnforcingWrapper`` over a bounds wrapper (``AssertOutOfBoundsWrapper`` for discrete
actions, ``ClipOutOfBoundsWrapper`` for continuous ones) over mpe2's ``SimpleEnv``. The conversion
steps the agents one at a time through both wrappers, whose every attribute read is forwarded by
``__getattr__``, and computes each agent's observation with ``last()`` before its turn only to
throw it away: half of simple_spread's step time. ``SimpleEnv.observe`` and ``state`` call the
scenario's ``observation`` (pure in every mpe2 scenario), so neither shortcut changes a value.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

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
