"""How exploitable a Leduc hold'em policy is: OpenSpiel's exploitability of a policy that acts on
PettingZoo's ``leduc_holdem_v4`` observations (rlcard's), in OpenSpiel's ``leduc_poker`` or in
rlcard's own rules.

Exploitability is what a best-responding opponent wins per hand against the policy, averaged over
the two seats (OpenSpiel's ``exploitability`` = NashConv / 2, in chips): 0 for a Nash equilibrium,
and the one figure for a poker policy that no choice of opponents can flatter. OpenSpiel computes
it exactly for a tabular policy, so the policy function is asked once for every information state
of ``leduc_poker``, shown as the observation PettingZoo would give.

**The observation** (rlcard's ``LeducholdemEnv._extract_state``, 36 floats:
``fastppo.games.leduc_rules.rlcard_observation``): the ranks of the private and the public card
and the chips each player has put in, one-hot; with an ``action_mask`` over rlcard's actions
``call, raise, fold, check``.

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

So ``exploitability(policy)`` scores the policy's rules of play in OpenSpiel's game: exact for that
game, and for a policy trained in PettingZoo's an approximation of its quality, not a measurement in
the game it was trained on. ``exploitability(policy, rules="rlcard")`` is that measurement: the
same OpenSpiel computation in rlcard's rules, written as an OpenSpiel game
(``fastppo.games.rlcard_leduc``, replayed move for move against PettingZoo in tests), where every
state is shown exactly as PettingZoo shows it (its fold included). Both are in chips per hand."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from fastppo.games import exploitability as exploitability_of
from fastppo.games.leduc_rules import ANTE, CALL, CHECK, FOLD, RAISE, RAISE_SIZES, SEATS, shown
from fastppo.games.openspiel_games import load_openspiel_game
from fastppo.games.players import PolicyFn

OPENSPIEL_FOLD, OPENSPIEL_CALL, OPENSPIEL_RAISE = range(3)
Rules = Literal["openspiel", "rlcard"]
"""Whose Leduc rules to score a policy in (see the module docstring)."""


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


def observation_of(state: Any, rules: Rules = "openspiel") -> dict[str, np.ndarray]:
    """What the player to move in ``state`` (of ``leduc_game(rules)``) would see in PettingZoo:
    ``{"observation": 36 floats, "action_mask": over call, raise, fold, check}``."""
    return VIEWS[rules](state)[0]


View = tuple[dict[str, np.ndarray], dict[int, int]]
"""(the observation shown for a state, its legal actions -> rlcard's numbers for them)."""


def _openspiel_view(state: Any) -> View:
    player = state.current_player()
    chips, public = openspiel_chips(state)
    facing_bet = chips[player] < max(chips)
    to_rlcard = {OPENSPIEL_FOLD: FOLD, OPENSPIEL_CALL: CALL if facing_bet else CHECK, OPENSPIEL_RAISE: RAISE}
    legal = {action: to_rlcard[action] for action in state.legal_actions()}
    return shown(state.history()[player], public, chips[player], chips[1 - player], list(legal.values())), legal


def _rlcard_view(state: Any) -> View:
    """``fastppo.games.rlcard_leduc``'s states hold rlcard's fields and actions as they are."""
    player = state.current_player()
    legal = {action: action for action in state.legal_actions()}
    return shown(state.cards[player], state.public, state.chips[player], state.chips[1 - player], list(legal)), legal


VIEWS = {"openspiel": _openspiel_view, "rlcard": _rlcard_view}


def leduc_game(rules: Rules = "openspiel") -> Any:
    """The OpenSpiel game of ``rules``: OpenSpiel's ``leduc_poker``, or rlcard's Leduc
    (``fastppo.games.rlcard_leduc``, what PettingZoo plays)."""
    if rules == "rlcard":
        load_openspiel_game("leduc_poker")  # a one-line error without OpenSpiel, before rlcard_leduc imports it
        from fastppo.games.rlcard_leduc import RlcardLeducGame  # needs OpenSpiel: imported when asked for

        return RlcardLeducGame()
    if rules != "openspiel":
        raise ValueError(f"rules must be 'openspiel' or 'rlcard', got {rules!r}")
    return load_openspiel_game("leduc_poker")


def tabular_policy(policy: PolicyFn, rules: Rules = "openspiel") -> Any:
    """``policy`` as OpenSpiel's ``TabularPolicy`` of ``leduc_game(rules)``: asked once per
    information state, shown as PettingZoo would show it (``fastppo.games.exploitability``). It
    must give legal actions all the probability (ValueError otherwise, naming the state)."""
    return exploitability_of.tabular_policy(leduc_game(rules), policy, VIEWS[rules], SEATS)


def exploitability(policy: PolicyFn, rules: Rules = "openspiel") -> float:
    """OpenSpiel's exploitability of ``policy``, chips per hand: in ``leduc_poker`` (the uniform
    random policy's: 2.3736), or with ``rules="rlcard"`` in the game PettingZoo plays (the uniform
    policy's: 2.9432; several seconds: a Python game). A Nash equilibrium's is 0."""
    return exploitability_of.table_exploitability(tabular_policy(policy, rules))


def uniform_policy(agent: str, observation: dict[str, np.ndarray]) -> np.ndarray:
    """Every legal action alike: the reference every trained policy must beat."""
    mask = np.asarray(observation["action_mask"], dtype=np.float64)
    return mask / mask.sum()
