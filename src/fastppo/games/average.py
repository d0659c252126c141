"""The time-average policy of a self-play pool (--self-play.average-policy), and its exploitability.

A learner trained by self-play against its own latest self circles around an equilibrium of a
poker game without settling on it: what converges, in fictitious play and NFSP, is the average of
the policies it played over time. Here that average is the pool's: every snapshot weighs the same
(each stands for the ``snapshot_every`` iterations it was taken after), and drawing a pool
opponent uniformly at the start of each game (``--self-play.sampling uniform``) is playing against
exactly this average, so the learner learns a best response to it, as fictitious play does.

Averaging a game's strategies is not averaging each information state's probabilities: a
snapshot that seldom reaches a state should count little there. The average behaviour policy of
snapshots ``k`` (weights ``w_k``) at an information state ``s`` of player ``p`` is

    avg(s) = sum_k w_k reach_k(s) pi_k(s) / sum_k w_k reach_k(s),

``reach_k(s)`` being the product of ``pi_k``'s probabilities of ``p``'s own moves on the way to
``s`` (one sequence, by perfect recall): the policy that plays as if it drew one snapshot for the
whole game. It is computed exactly on the game's policy table (``PolicyTables``), so the games are
those whose exploitability is scored (``fastppo.games.exploitability.scored_game``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fastppo.agents.agent import Agent
from fastppo.core.normalize import RunningMeanStd
from fastppo.games.exploitability import openspiel_view, scored_game, table_exploitability
from fastppo.games.pool import Snapshot
from fastppo.policies import ActorCritic
from fastppo.policies.population import GroupedActorCritic


class PolicyTables:
    """Every information state of an ``openspiel:<game>`` as the learner's observation rows, so
    that a policy's whole table is one batched forward (``probabilities``), and the own-move
    sequence leading to each state, for the reach probabilities an average needs."""

    def __init__(self, env_id: str, learner: Agent):
        from open_spiel.python.policy import TabularPolicy

        self.table = TabularPolicy(scored_game(env_id))
        self.clip_obs = learner.config.env.clip_obs
        pettingzoo = learner.pettingzoo
        assert pettingzoo is not None  # a game's agent (fastppo.games.league)
        rows: list[np.ndarray] = []
        masks: list[np.ndarray] = []
        states = self.table.states
        legal = np.zeros(self.table.action_probability_array.shape, dtype=bool)
        for row, state in enumerate(states):
            observation, actions = openspiel_view(state)  # an openspiel env's actions are OpenSpiel's own
            _, obs, mask = pettingzoo.rows(
                learner.config.multi_agent, {f"player_{state.current_player()}": observation}, None
            )
            rows.append(obs[0])
            masks += [] if mask is None else [mask[0]]
            legal[row, list(actions)] = True
        self.legal = legal
        self.obs = torch.as_tensor(np.stack(rows), dtype=torch.float32, device=learner.device)
        self.masks = torch.as_tensor(np.stack(masks), device=learner.device) if masks else None
        self.parent, self.parent_action, self.depth = _own_parents(self.table)

    @torch.no_grad()
    def probabilities(self, policy: ActorCritic | GroupedActorCritic, obs_rms: RunningMeanStd | None) -> np.ndarray:
        """``policy``'s probability of each action at each information state ([states, actions],
        a ``TabularPolicy``'s array): its masked softmax, what it samples from, renormalised over
        the legal actions."""
        obs = self.obs if obs_rms is None else obs_rms.normalize(self.obs, self.clip_obs)
        states, actions = self.legal.shape
        every = torch.arange(actions, device=obs.device).repeat(states)
        mask = None if self.masks is None else self.masks.repeat_interleave(actions, 0)
        logprob, _, _ = policy.evaluate(obs.repeat_interleave(actions, 0), every, mask)
        probabilities = logprob.exp().reshape(states, actions).cpu().double().numpy() * self.legal
        return probabilities / probabilities.sum(1, keepdims=True)

    def reach(self, probabilities: np.ndarray) -> np.ndarray:
        """Each state's own-move reach probability under the policies ``probabilities`` ([k,
        states, actions] -> [k, states])."""
        reach = np.ones(probabilities.shape[:2])
        for depth in range(1, int(self.depth.max(initial=0)) + 1):
            at = np.flatnonzero(self.depth == depth)
            reach[:, at] = reach[:, self.parent[at]] * probabilities[:, self.parent[at], self.parent_action[at]]
        return reach

    def average(self, probabilities: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """The average behaviour policy of the policies ``probabilities`` ([k, states, actions])
        weighted ``weights`` ([k]): each state's probabilities weighted by how often each policy
        reaches it (module docstring); where none does, their weighted mean."""
        reached = weights[:, None] * self.reach(probabilities)
        total = reached.sum(0)
        mean = np.einsum("k,ksa->sa", weights / weights.sum(), probabilities)
        summed = np.einsum("ks,ksa->sa", reached, probabilities)
        return np.where(total[:, None] > 0, summed / np.maximum(total, 1e-300)[:, None], mean)

    def exploitability(self, probabilities: np.ndarray) -> float:
        """OpenSpiel's exploitability of the policy table ``probabilities`` ([states, actions])."""
        self.table.action_probability_array[:] = probabilities
        return table_exploitability(self.table)


def _own_parents(table: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each information state of a ``TabularPolicy``: the state of its player's previous move
    and that move (-1 for a first move), and how many own moves lead to it."""
    states = table.states  # type: ignore[attr-defined]
    parent = np.full(len(states), -1)
    parent_action = np.full(len(states), -1)
    depth = np.zeros(len(states), dtype=int)
    for row, state in enumerate(states):
        player, replay = state.current_player(), state.get_game().new_initial_state()
        for action in state.history():
            if not replay.is_chance_node() and replay.current_player() == player:
                parent[row], parent_action[row] = table.state_index(replay), action  # type: ignore[attr-defined]
                depth[row] += 1
            replay.apply_action(action)
    return parent, parent_action, depth


class PoolAverage:
    """The exploitability of a pool's average policy (module docstring), its snapshots' tables
    computed once each."""

    def __init__(self, env_id: str, learner: Agent):
        self.tables = PolicyTables(env_id, learner)
        self._cache: dict[int, tuple[Snapshot, np.ndarray]] = {}  # by iteration: the snapshot and its table

    def table(self, snapshot: Snapshot) -> np.ndarray:
        cached = self._cache.get(snapshot.iteration)
        if cached is None or cached[0] is not snapshot:  # a resumed league loads new snapshot objects
            cached = (snapshot, self.tables.probabilities(snapshot.policy, snapshot.obs_rms))
            self._cache[snapshot.iteration] = cached
        return cached[1]

    def __call__(self, members: Sequence[Snapshot]) -> float:
        """The exploitability of the average of ``members`` (a non-empty pool), equally weighted."""
        self._cache = {s.iteration: c for s in members if (c := self._cache.get(s.iteration)) is not None}
        probabilities = np.stack([self.table(s) for s in members])
        return self.tables.exploitability(self.tables.average(probabilities, np.ones(len(members))))
