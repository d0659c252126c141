"""`fastppo play RUN_DIR`: a person plays a trained agent of a turn-based game in the terminal."""

from __future__ import annotations

import argparse

from fastppo.cli.run import seed


def register(subparsers: argparse._SubParsersAction) -> None:
    play = subparsers.add_parser(
        "play",
        help="play a trained agent of a turn-based game in the terminal, moves typed as numbers (tic-tac-toe, "
        "connect four, Leduc hold'em)",
        allow_abbrev=False,
    )
    play.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        help="run directory (or a checkpoint folder in it) of an agent trained on the game",
    )
    play.add_argument(
        "--seat",
        type=int,
        choices=(0, 1),
        default=None,
        help="your seat: 0 or 1, the game's first or second player (X or O; default: 0 and 1 by turns)",
    )
    play.add_argument("--games", type=int, default=1, help="games to play (default: 1); q or the end of input quits")
    play.add_argument(
        "--stochastic", action="store_true", help="the agent samples its moves instead of playing its most likely one"
    )
    play.add_argument(
        "--search",
        type=int,
        default=0,
        metavar="N",
        help="the agent looks ahead N simulations of tree search before each move, its policy as the prior and "
        "its value as the score (tic-tac-toe, connect four, perfect-information OpenSpiel games; default: 0)",
    )
    play.add_argument(
        "--seed", type=seed, default=None, help="seed the deals and the agent's sampling (default: unseeded)"
    )
    play.set_defaults(func=run_play)


def run_play(args: argparse.Namespace) -> int:
    from fastppo.agents.agent import load_agent
    from fastppo.games.human import HumanPlayer, Quit, play_against

    agent = load_agent(args.run_dir)
    human = HumanPlayer(agent.config.env.env_id)  # a game without a text board is refused before it is built
    try:
        play_against(agent, human, args.games, args.seat, not args.stochastic, args.seed, args.search)
    except Quit:
        print("\nfastppo: quit")
    return 0
