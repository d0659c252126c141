"""Leduc hold'em as data: the numbers rlcard's rules (PettingZoo's ``leduc_holdem_v4``) and
OpenSpiel's ``leduc_poker`` are made of, and the observation rlcard shows a player. Shared by the
exploitability of a policy (``fastppo.games.leduc``) and rlcard's rules as an OpenSpiel game
(``fastppo.games.rlcard_leduc``); importing it needs neither library."""

from __future__ import annotations

import numpy as np

LEDUC_ENV_ID = "pz:pettingzoo.classic.leduc_holdem_v4"
SEATS = ("player_0", "player_1")
"""PettingZoo's seat names: rlcard's and OpenSpiel's player ``i`` is ``SEATS[i]``."""

RLCARD_ACTIONS = ("call", "raise", "fold", "check")
CALL, RAISE, FOLD, CHECK = range(4)
"""rlcard's action numbers (``LeducholdemEnv.actions``), PettingZoo's too."""

CARDS = 6
"""J J Q Q K K (two suits): card ``c`` has rank ``c // 2``, OpenSpiel's numbering."""
RANKS = 3
RAISE_SIZES = (2, 4)
"""A raise adds 2 chips in round 1, 4 in round 2, in both libraries."""
MAX_RAISES = 2
"""Raises a round, in both libraries (rlcard: a blind is no raise)."""
SMALL_BLIND, BIG_BLIND = 1, 2
"""rlcard's forced bets."""
ANTE = 1
"""OpenSpiel's forced bet, each player."""
CHIP_SLOTS = 15
"""Chips 0-14 in rlcard's observation (its most: the big blind, two raises of 2, two of 4)."""


def rank(card: int) -> int:
    return card // 2


def rlcard_observation(hand_rank: int, public_rank: int | None, my_chips: int, opponent_chips: int) -> np.ndarray:
    """The 36 floats rlcard's ``LeducholdemEnv._extract_state`` gives (one-hots): ``[0:3]`` the
    private card's rank (J, Q, K: rlcard's ``card2index.json``), ``[3:6]`` the public card's (all 0
    before it is dealt), ``[6:21]`` the chips the player has put in, ``[21:36]`` the opponent's."""
    observation = np.zeros(2 * RANKS + 2 * CHIP_SLOTS, dtype=np.float32)
    observation[hand_rank] = 1
    if public_rank is not None:
        observation[RANKS + public_rank] = 1
    observation[2 * RANKS + my_chips] = 1
    observation[2 * RANKS + CHIP_SLOTS + opponent_chips] = 1
    return observation


def shown(card: int, public: int | None, mine: int, theirs: int, legal: list[int]) -> dict[str, np.ndarray]:
    """PettingZoo's observation of a player holding ``card`` (0-5), ``public`` (0-5 or None), with
    ``mine`` and ``theirs`` chips in, whose legal actions (rlcard's numbers) are ``legal``."""
    mask = np.zeros(len(RLCARD_ACTIONS), dtype=np.int8)
    mask[legal] = 1
    return {
        "observation": rlcard_observation(rank(card), None if public is None else rank(public), mine, theirs),
        "action_mask": mask,
    }
