"""How exploitable a Leduc hold'em policy is: OpenSpiel's exploitability of a policy that acts on
PettingZoo's ``leduc_holdem_v4`` observations (rlcard's), in OpenSpiel's ``leduc_poker``.

Exploitability is what a best-responding opponent wins per hand against the policy, averaged over
the two seats (OpenSpiel's ``exploitability`` = NashConv / 2, in chips): 0 for a Nash equilibrium,
and the one figure for a poker policy that no choice of opponents can flatter. OpenSpiel computes
it exactly for a tabular policy, so the policy function is asked once for every information state
of ``leduc_poker``, shown as the observation PettingZoo would give.

**The observation** (rlcard's ``LeducholdemEnv._extract_state``, 36 floats, one-hots): ``[0:3]``
the private card's rank (J, Q, K; rlcard's ``card2index.json``), ``[3:6]`` the public card's rank
(all 0 before it is dealt), ``[6:21]`` the chips the player has put in (0-14), ``[21:36]`` the
opponent's; with an ``action_mask`` over rlcard's actions ``call, raise, fold, check``.

**From OpenSpiel's state to it**: OpenSpiel's cards are 0-5, rank ``card // 2`` (J J Q Q K K; two
cards of a rank tie, and a card pairs with the other of its rank); the history is ``[private card
of player 0, of player 1, round-1 actions, public card, round-2 actions]``; the chips come from
replaying the betting (antes 1, a call matches, a raise matches and adds 2 in round 1, 4 in round
2; checked against OpenSpiel's own "Money" in tests). OpenSpiel's actions are ``fold, call,
raise``; its call is rlcard's ``call`` when facing a bet and ``check`` when not.

**Not the same game.** rlcard's Leduc (what PettingZoo plays) and OpenSpiel's share the deck (J,
Q, K in two suits), one private and one public card, the raise sizes (2, then 4), at most two
raises a round and the showdown (a pair with the public card wins, else the higher card, equal
ranks split), and differ in:

1. forced bets: rlcard posts **blinds**, 1 and 2, the small blind chosen at random each hand and
   acting first; OpenSpiel posts **antes**, 1 each, and player 0 acts first. The first decision is
   at chips (1, 2) in rlcard and (1, 1) in OpenSpiel, so OpenSpiel's game shows a policy
   situations rlcard never does (chips 1 vs 1, 3 vs 1, ...) and the pots differ by one chip;
2. who opens round 2: OpenSpiel's player 0; in rlcard the player after the one whose call or
   check closed round 1;
3. folding: rlcard lets a player fold when it could check (a move no good policy makes); OpenSpiel
   does not, so the mask given here leaves ``fold`` out where OpenSpiel has no fold;
4. units: rlcard's payoffs (PettingZoo's rewards) are in big blinds (chips / 2), OpenSpiel's in
   chips.

So ``exploitability`` scores the policy's rules of play in OpenSpiel's game: exact for that game,
and for a policy trained in PettingZoo's an approximation of its quality, not a measurement in the
game it was trained on."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo.agents.openspiel_games import load_openspiel_game
from fastppo.agents.players import PolicyFn

LEDUC_ENV_ID = "pz:pettingzoo.classic.leduc_holdem_v4"
SEATS = ("player_0", "player_1")
"""PettingZoo's seat names; OpenSpiel's player ``i`` is shown as ``SEATS[i]``."""
RLCARD_ACTIONS = ("call", "raise", "fold", "check")
CALL, RAISE, FOLD, CHECK = range(4)
OPENSPIEL_FOLD, OPENSPIEL_CALL, OPENSPIEL_RAISE = range(3)
RANKS = 3
CHIP_SLOTS = 15
"""Chips 0-14 (rlcard's most: blinds, two raises of 2, two of 4)."""
ANTE = 1
RAISE_SIZES = (2, 4)


def rlcard_observation(hand_rank: int, public_rank: int | None, my_chips: int, opponent_chips: int) -> np.ndarray:
    """The 36 floats rlcard's ``LeducholdemEnv._extract_state`` gives (ranks 0-2: J, Q, K)."""
    observation = np.zeros(2 * RANKS + 2 * CHIP_SLOTS, dtype=np.float32)
    observation[hand_rank] = 1
    if public_rank is not None:
        observation[RANKS + public_rank] = 1
    observation[2 * RANKS + my_chips] = 1
    observation[2 * RANKS + CHIP_SLOTS + opponent_chips] = 1
    return observation


def openspiel_chips(state: Any) -> tuple[list[int], int | None]:
    """(each player's chips in the pot, the public card or None) of an OpenSpiel ``leduc_poker``
    state, from replaying its history (see the module docstring)."""
    replay = state.get_game().new_initial_state()
    chips, public, deals = [ANTE, ANTE], None, 0
    for action in state.history():
        if replay.is_chance_node():
            deals += 1
            public = action if deals == 3 else public
        elif action == OPENSPIEL_CALL:
            chips[replay.current_player()] = max(chips)
        elif action == OPENSPIEL_RAISE:
            chips[replay.current_player()] = max(chips) + RAISE_SIZES[public is not None]
        replay.apply_action(action)
    return chips, public


def openspiel_observation(state: Any) -> dict[str, np.ndarray]:
    """What the player to move in OpenSpiel's ``leduc_poker`` ``state`` would see in PettingZoo:
    ``{"observation": 36 floats, "action_mask": over call, raise, fold, check}``."""
    return _shown(state)[0]


def _shown(state: Any) -> tuple[dict[str, np.ndarray], dict[int, int]]:
    """(``openspiel_observation``, OpenSpiel's legal actions -> rlcard's numbers for them)."""
    player = state.current_player()
    chips, public = openspiel_chips(state)
    facing_bet = chips[player] < max(chips)
    to_rlcard = {OPENSPIEL_FOLD: FOLD, OPENSPIEL_CALL: CALL if facing_bet else CHECK, OPENSPIEL_RAISE: RAISE}
    legal = {action: to_rlcard[action] for action in state.legal_actions()}
    observation = rlcard_observation(state.history()[player] // 2, None if public is None else public // 2, chips[player], chips[1 - player])
    mask = np.zeros(len(RLCARD_ACTIONS), dtype=np.int8)
    mask[list(legal.values())] = 1
    return {"observation": observation, "action_mask": mask}, legal


def tabular_policy(policy: PolicyFn) -> Any:
    """``policy`` as OpenSpiel's ``TabularPolicy`` of ``leduc_poker``: asked once per information
    state. It must give legal actions all the probability (ValueError otherwise, naming the state)."""
    from open_spiel.python.policy import TabularPolicy

    table = TabularPolicy(load_openspiel_game("leduc_poker"))
    for row, state in enumerate(table.states):
        shown, legal = _shown(state)
        probabilities = np.asarray(policy(SEATS[state.current_player()], shown), dtype=np.float64)
        if probabilities.shape != (len(RLCARD_ACTIONS),) or not np.all(np.isfinite(probabilities)) or np.any(probabilities < 0):
            raise ValueError(f"the policy gave {probabilities.tolist()} for {state.information_state_string()}: give 4 probabilities, one per action (call, raise, fold, check)")
        legal_mass = probabilities[list(legal.values())].sum()
        if legal_mass <= 0 or probabilities.sum() - legal_mass > 1e-6 * probabilities.sum():
            raise ValueError(f"the policy gave {probabilities.tolist()} for {state.information_state_string()}, whose legal actions are {shown['action_mask'].tolist()}: give illegal actions probability 0")
        table.action_probability_array[row] = 0
        for action, rlcard_action in legal.items():
            table.action_probability_array[row, action] = probabilities[rlcard_action] / legal_mass
    return table


def exploitability(policy: PolicyFn) -> float:
    """OpenSpiel's exploitability of ``policy`` in ``leduc_poker``, chips per hand (the uniform
    random policy's: 2.3736; a Nash equilibrium's: 0)."""
    from open_spiel.python.algorithms.exploitability import exploitability as openspiel_exploitability

    table = tabular_policy(policy)
    return float(openspiel_exploitability(table.game, table))


def uniform_policy(agent: str, observation: dict[str, np.ndarray]) -> np.ndarray:
    """Every legal action alike: the reference every trained policy must beat."""
    mask = np.asarray(observation["action_mask"], dtype=np.float64)
    return mask / mask.sum()
