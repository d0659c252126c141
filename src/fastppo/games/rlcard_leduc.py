"""rlcard's Leduc hold'em, the game PettingZoo's ``leduc_holdem_v4`` plays, written as an OpenSpiel
game, so that OpenSpiel's exploitability can score a policy in the very game it was trained on
(``fastppo.games.leduc.exploitability(policy, rules="rlcard")``).

The rules are rlcard's (``rlcard.games.leducholdem`` and ``limitholdem.Round``, read and replayed
move for move against PettingZoo in tests/games/test_games.py): a small blind of 1 and a big blind of 2,
the small blind seat drawn at random each hand and acting first; raises of 2 in round 1 and 4 in
round 2, at most two a round; a round ends when both players called or checked since its last
raise, and round 2 opens with the player after the one who closed round 1; fold is legal at every
decision; a pair with the public card wins, else the higher rank, equal ranks split. The actions
are rlcard's own numbers (call 0, raise 1, fold 2, check 3) and a player's view of a state is the
observation PettingZoo shows it. Returns are in chips (PettingZoo's rewards are half these: rlcard
pays in big blinds), as OpenSpiel's ``leduc_poker`` reports its own.

Chance deals the small blind seat first, then the two private cards, then the public card: the
same distribution as rlcard's shuffled deck. Cards are 0-5, rank ``card // 2`` (J J Q Q K K), as in
OpenSpiel's ``leduc_poker``."""

from __future__ import annotations

from typing import Any

import pyspiel

from fastppo.games.leduc_rules import (
    BIG_BLIND,
    CALL,
    CARDS,
    CHECK,
    FOLD,
    MAX_RAISES,
    RAISE,
    RAISE_SIZES,
    RLCARD_ACTIONS,
    SMALL_BLIND,
    rank,
)

MOVE_LETTERS = "crfk"
"""call, raise, fold, check, in a state's ``moves``."""

_GAME_TYPE = pyspiel.GameType(
    short_name="fastppo_rlcard_leduc_poker",
    long_name="rlcard's Leduc hold'em (PettingZoo leduc_holdem_v4)",
    dynamics=pyspiel.GameType.Dynamics.SEQUENTIAL,
    chance_mode=pyspiel.GameType.ChanceMode.EXPLICIT_STOCHASTIC,
    information=pyspiel.GameType.Information.IMPERFECT_INFORMATION,
    utility=pyspiel.GameType.Utility.ZERO_SUM,
    reward_model=pyspiel.GameType.RewardModel.TERMINAL,
    max_num_players=2,
    min_num_players=2,
    provides_information_state_string=True,
    provides_information_state_tensor=False,
    provides_observation_string=False,
    provides_observation_tensor=False,
)
_GAME_INFO = pyspiel.GameInfo(
    num_distinct_actions=4,
    max_chance_outcomes=CARDS,
    num_players=2,
    min_utility=-14.0,
    max_utility=14.0,
    utility_sum=0.0,
    max_game_length=12,  # 4 deals, 4 actions a round (e.g. call, raise, raise, call)
)


class RlcardLeducGame(pyspiel.Game):
    def __init__(self, params: dict[str, Any] | None = None):
        super().__init__(_GAME_TYPE, _GAME_INFO, params or {})

    def new_initial_state(self) -> RlcardLeducState:
        return RlcardLeducState(self)

    def make_py_observer(self, iig_obs_type: Any = None, params: Any = None) -> InformationState:
        return InformationState()


class RlcardLeducState(pyspiel.State):
    """A hand: rlcard's ``Game`` and ``Round`` fields under plain names. Tuples and strings, not
    lists: OpenSpiel copies a Python state by deep-copying its fields at every node it visits, and
    immutable ones copy fastest (a best response visits ~55 000 nodes)."""

    def __init__(self, game: RlcardLeducGame):
        super().__init__(game)
        self.small_blind: int | None = None
        self.cards: tuple[int, ...] = ()
        self.public: int | None = None
        self.chips = (0, 0)
        self.bets = (0, 0)  # this round's (rlcard's Round.raised)
        self.raises = 0
        self.calls_since_raise = 0  # rlcard's not_raise_num
        self.round = 0
        self.to_move = 0
        self.folded: int | None = None
        self.moves = ""  # "crfk" letters for call, raise, fold, check; "/" ends round 1

    def current_player(self) -> int:
        if self.is_terminal():
            return pyspiel.PlayerId.TERMINAL
        if self.small_blind is None or len(self.cards) < 2 or (self.round == 1 and self.public is None):
            return pyspiel.PlayerId.CHANCE
        return self.to_move

    def is_terminal(self) -> bool:
        return self.folded is not None or self.round == 2

    def chance_outcomes(self) -> list[tuple[int, float]]:
        if self.small_blind is None:
            return [(0, 0.5), (1, 0.5)]
        left = [card for card in range(CARDS) if card not in self.cards]
        return [(card, 1 / len(left)) for card in left]

    def _legal_actions(self, player: int) -> list[int]:
        legal = [CALL, RAISE, FOLD, CHECK]
        if self.raises >= MAX_RAISES:
            legal.remove(RAISE)
        legal.remove(CHECK if self.bets[player] < max(self.bets) else CALL)
        return legal

    def _apply_action(self, action: int) -> None:
        if self.is_chance_node():
            self._deal(action)
            return
        player = self.to_move
        if action in (CALL, RAISE):
            size = RAISE_SIZES[self.round] if action == RAISE else 0
            chips, bets = list(self.chips), list(self.bets)
            chips[player] += max(bets) + size - bets[player]
            bets[player] = max(bets) + size
            self.chips, self.bets = (chips[0], chips[1]), (bets[0], bets[1])
        if action == FOLD:
            self.folded = player
        elif action == RAISE:
            self.raises += 1
            self.calls_since_raise = 1
        else:
            self.calls_since_raise += 1
        self.moves += MOVE_LETTERS[action]
        self.to_move = 1 - player
        if self.folded is None and self.calls_since_raise >= 2:  # the round is over; its next player opens the next
            self.round += 1
            self.moves += "/"
            self.bets, self.raises, self.calls_since_raise = (0, 0), 0, 0

    def _deal(self, outcome: int) -> None:
        if self.small_blind is None:
            self.small_blind = outcome
        elif len(self.cards) < 2:
            self.cards += (outcome,)
            if len(self.cards) == 2:
                self.chips = (SMALL_BLIND, BIG_BLIND) if self.small_blind == 0 else (BIG_BLIND, SMALL_BLIND)
                self.bets = self.chips
                self.to_move = self.small_blind
        else:
            self.public = outcome

    def returns(self) -> list[float]:
        if not self.is_terminal():
            return [0.0, 0.0]
        if self.folded is not None:
            winners = [1 - self.folded]
        else:
            assert self.public is not None  # a showdown comes after the public card
            ranks = [rank(card) for card in self.cards]
            pair = [p for p in (0, 1) if ranks[p] == rank(self.public)]
            winners = pair or [p for p in (0, 1) if ranks[p] == max(ranks)]
        pot = sum(self.chips)
        return [pot / len(winners) * (p in winners) - self.chips[p] for p in (0, 1)]

    def _action_to_string(self, player: int, action: int) -> str:
        if player == pyspiel.PlayerId.CHANCE:
            return f"small blind {action}" if self.small_blind is None else f"card {action}"
        return RLCARD_ACTIONS[action]

    def __str__(self) -> str:
        return (
            f"small blind {self.small_blind} cards {self.cards} public {self.public} chips {self.chips} moves "
            f"{self.moves}"
        )


class InformationState:
    """What a player knows (perfect recall): its seat and card, the small blind's seat, the public
    card and every move. OpenSpiel keys a tabular policy and a best response by it."""

    tensor = None

    def set_from(self, state: RlcardLeducState, player: int) -> None:
        """No tensor (the game declares none)."""

    def string_from(self, state: RlcardLeducState, player: int) -> str:
        card = state.cards[player] if len(state.cards) > player else None
        return f"seat {player} small blind {state.small_blind} card {card} public {state.public} moves {state.moves}"
