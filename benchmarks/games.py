"""The figures of a trained game agent, measured at the end of training with its deterministic
policy: tic-tac-toe against random moves and a perfect minimax player; connect four against random
moves and OpenSpiel's MCTS at several strengths; Leduc hold'em's winnings against random and its
exploitability (OpenSpiel's, in OpenSpiel's rules and in rlcard's, which PettingZoo plays); and the
self-play speed of its training (games/s, the env's share of the time, from metrics.jsonl).

    fastppo train pz:pettingzoo.classic.tictactoe_v3 --run-dir runs/ttt      # the preset
    python benchmarks/games.py runs/ttt                                      # 200 games per opponent
    python benchmarks/games.py runs/c4 --mcts 10,100,1000 --mcts-games 20
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from common import footer, header, positive
from fastppo.agents.agent import load_agent
from fastppo.errors import FastPPOError
from fastppo.games.game_env import game_module
from fastppo.games.leduc import exploitability
from fastppo.games.matches import GameResults, play_games
from fastppo.games.players import AgentPlayer, agent_policy, player_from_spec

TICTACTOE, CONNECT_FOUR, LEDUC = (
    "pettingzoo.classic.tictactoe_v3",
    "pettingzoo.classic.connect_four_v3",
    "pettingzoo.classic.leduc_holdem_v4",
)


def simulations(text: str) -> list[int]:
    """'10,100,1000' -> [10, 100, 1000]: positive counts of MCTS simulations."""
    return [positive(part) for part in text.split(",")]


def training_speed(run_dir: Path) -> str:
    """Games/s of self-play and the env's share of the time over the whole run (metrics.jsonl)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    games = sum(r.get("charts/episodes", 0.0) for r in records)
    seconds = sum(sum(v for k, v in r.items() if k.startswith("time/")) for r in records)
    env = sum(r.get("time/env", 0.0) for r in records)
    steps = records[-1]["global_step"] if records else 0
    return (
        f"{steps} steps, {games:.0f} games in {seconds:.0f} s of rollouts and updates: "
        f"{games / max(seconds, 1e-9):.1f} games/s, env {100 * env / max(seconds, 1e-9):.0f}% of the time"
    )


def row(opponent: str, results: GameResults) -> str:
    wins, draws, losses = (sum(getattr(s, k) for s in results.seats) for k in ("wins", "draws", "losses"))
    seats = "; ".join(f"{s.seat}: {s.wins}/{s.draws}/{s.losses}" for s in results.seats)
    mean = sum(s.total_return for s in results.seats) / max(results.games, 1)
    return (
        f"| {opponent} | {results.games} | {wins} / {draws} / {losses} | {seats} | {mean:+.3f} | "
        f"{results.games_per_second:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="a run folder trained on a turn-based game")
    parser.add_argument(
        "--games", type=positive, default=200, help="games against random and minimax, half in each seat (default 200)"
    )
    parser.add_argument(
        "--mcts",
        type=simulations,
        default=[10, 100, 1000],
        help="connect four: MCTS simulations to play against, comma-separated (default 10,100,1000)",
    )
    parser.add_argument("--mcts-games", type=positive, default=20, help="games against each MCTS strength (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        agent = load_agent(args.run_dir)
        game_module(agent.config.env.env_id)
    except FastPPOError as exc:
        parser.error(str(exc))
    env_id = agent.config.env.env_id
    game = game_module(env_id)
    header(f"{env_id}: the trained agent of {args.run_dir} (deterministic) against fixed players")
    print(f"training: {training_speed(args.run_dir)}")
    opponents = (
        ["random"]
        + (["minimax"] if game == TICTACTOE else [])
        + ([f"mcts:{n}" for n in args.mcts] if game == CONNECT_FOUR else [])
    )
    print(
        "\n| opponent | games | agent W / D / L | per seat (agent's seat: W/D/L) | agent's mean return | games/s "
        "|\n|---|--:|---|---|--:|--:|"
    )
    for spec in opponents:
        games = args.mcts_games if spec.startswith("mcts:") else args.games
        results = play_games(
            env_id,
            (AgentPlayer(agent, deterministic=True), player_from_spec(spec, env_id, args.seed)),
            games,
            seed=args.seed,
        )
        print(row(spec, results), flush=True)
    if game == LEDUC:
        policy = agent_policy(agent)
        for rules in ("openspiel", "rlcard"):
            start = time.perf_counter()
            value = exploitability(policy, rules=rules)
            print(
                f"exploitability in {rules}'s rules: {value:.4f} chips per hand ({time.perf_counter() - start:.1f} s)"
            )
    footer()


if __name__ == "__main__":
    main()
