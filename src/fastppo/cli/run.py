"""`fastppo eval|record|plot|export RUN_DIR ...`: look at a trained run and ship it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fastppo.config import check_seed


def seed(text: str) -> int:
    """argparse type of --seed (its name is argparse's 'invalid seed value' for a non-integer)."""
    return check_seed(int(text), "--seed")


ENV_ID_HELP = (
    "{verb} on this env (default: the run's own); a run trained on your code (module:Class, file.py:Class) needs "
    "it named here, as fastppo never imports code that a run folder names"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    ev = subparsers.add_parser(
        "eval",
        help="evaluate a trained run: mean ± std return and length; a turn-based game's: wins, draws and losses "
        "per seat against --opponent",
        allow_abbrev=False,
    )
    ev.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        help="run directory (or a checkpoint folder in it); a --seeds folder: each seed's run",
    )
    ev.add_argument(
        "--episodes", type=int, default=None, help="episodes to play (default: 10; a turn-based game counts --games)"
    )
    mode = ev.add_mutually_exclusive_group()
    mode.add_argument(
        "--deterministic",
        action="store_true",
        default=None,
        help="take the most likely action instead of sampling (a turn-based game's default)",
    )
    mode.add_argument(
        "--stochastic",
        dest="deterministic",
        action="store_false",
        help="sample actions (the default, except on a turn-based game)",
    )
    ev.add_argument(
        "--opponent",
        default=None,
        metavar="SPEC",
        help="a turn-based game's opponent: random (uniform legal moves), mcts:N (OpenSpiel's MCTS, N = 2 to "
        "10000 simulations per move; tic-tac-toe, connect four), minimax (perfect tic-tac-toe), the run "
        "folder of an agent of the same game, or a player class of yours, named as an env is: file.py:Class "
        "or module:Class, built with no arguments, with act(env, agent, history) and reset(seed) (default: "
        "random)",
    )
    ev.add_argument(
        "--games",
        type=int,
        default=None,
        help="a turn-based game's games against --opponent, seats swapped every game (default: 100)",
    )
    ev.add_argument(
        "--search",
        type=int,
        default=0,
        metavar="N",
        help="a turn-based game with the whole state in view (tic-tac-toe, connect four, perfect-information "
        "OpenSpiel games without chance): play each move after N simulations of tree search (PUCT, as AlphaZero "
        "plays) with the agent's policy as the prior and its value as the score (default: 0, the policy alone)",
    )
    ev.add_argument(
        "--seed", type=seed, default=None, help="seed the env and the policy's sampling (default: unseeded)"
    )
    ev.add_argument("--env-id", default=None, help=ENV_ID_HELP.format(verb="evaluate"))
    ev.add_argument(
        "--json", action="store_true", help="print the result as one JSON object (a --seeds folder: one line per seed)"
    )
    ev.set_defaults(func=run_eval)

    rec = subparsers.add_parser("record", help="render episodes of a trained run to an MP4", allow_abbrev=False)
    rec.add_argument("run_dir", metavar="RUN_DIR", help="run directory (or a checkpoint folder in it)")
    rec.add_argument("--episodes", type=int, default=1, help="episodes to record, one after another (default: 1)")
    rec.add_argument("--out", default=None, help="output file (default: RUN_DIR/videos/record.mp4)")
    rec.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the most likely one")
    rec.add_argument("--seed", type=seed, default=None, help="seed the env (default: unseeded)")
    rec.add_argument("--env-id", default=None, help=ENV_ID_HELP.format(verb="record"))
    rec.set_defaults(func=run_record)

    plot = subparsers.add_parser(
        "plot", help="plot learning curves and diagnostics of runs (seeds grouped)", allow_abbrev=False
    )
    plot.add_argument(
        "run_dirs",
        metavar="RUN_DIR",
        nargs="+",
        help="run directories, or folders of runs (a --seeds folder); same env and config are drawn as seeds",
    )
    plot.add_argument("--out", default=None, help="output image (default: RUN_DIR/plot.png for one run, else plot.png)")
    plot.add_argument(
        "--smooth", type=int, default=10, help="moving-average window in iterations (default: 10; 1 = raw)"
    )
    plot.set_defaults(func=run_plot)

    export = subparsers.add_parser(
        "export", help="export the deterministic policy (normalisation included) to ONNX", allow_abbrev=False
    )
    export.add_argument("run_dir", metavar="RUN_DIR", help="run directory (or a checkpoint folder in it)")
    export.add_argument("--onnx", required=True, metavar="FILE", help="output .onnx file")
    export.add_argument("--opset", type=int, default=18, help="ONNX opset (default: 18)")
    export.set_defaults(func=run_export)


def run_eval(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from fastppo.agents.agent import load_agent
    from fastppo.api import evaluate
    from fastppo.files.run_folder import seed_folders
    from fastppo.games.matches import GameResults

    seeds = seed_folders(args.run_dir)  # a --seeds folder: each seed's run, with the same episodes and env seed
    headlines: list[tuple[str, float, str]] = []  # (what, value, format): each seed's headline for the summary line
    for run_dir in seeds or [Path(args.run_dir)]:
        agent = load_agent(run_dir, env_id=args.env_id)
        # The threads its run acted with on one env (Config.rollout_threads): evaluation only acts, a
        # few envs at a time, and a wide run's update threads would crowd them.
        torch.set_num_threads(agent.config.rollout_threads(stacked=False, rows=1))
        result = evaluate(
            agent, args.env_id, args.episodes, args.deterministic, args.seed, args.opponent, args.games, args.search
        )
        headline = (
            ("win rate", result.win_rate, ".2f")
            if isinstance(result, GameResults)
            else ("return", result.mean_return, ".1f")
        )
        what, value, form = headline
        if value is not None:  # None: agents in several groups, no headline (each group's is printed)
            headlines.append((what, value, form))
        if args.json:
            print(json.dumps({**result.to_dict(), **({"run_dir": str(run_dir)} if seeds else {})}))
        else:
            print(f"fastppo: {result}" + (f" ({run_dir.name})" if seeds else ""))
    if seeds and headlines and not args.json:
        what, _, form = headlines[0]
        values = [value for _, value, _ in headlines]
        print(
            f"fastppo: mean {what} over the {len(seeds)} seeds "
            f"{np.mean(values):{form}} (min {min(values):{form}}, max {max(values):{form}}); statistics: "
            f"fastppo report {args.run_dir}"
        )
    return 0


def run_record(args: argparse.Namespace) -> int:
    from fastppo.agents.evaluation import record
    from fastppo.files.outputs import no_links

    out = Path(args.out) if args.out else Path(args.run_dir) / "videos" / "record.mp4"
    if not args.out:  # in the run folder: RUN/videos a link would take the video elsewhere
        no_links(out, "the video", inside=Path(args.run_dir))
    path, result, frames = record(
        args.run_dir, out, episodes=args.episodes, env_id=args.env_id, deterministic=not args.stochastic, seed=args.seed
    )
    print(f"fastppo: wrote {path} ({frames} frames; {result})")
    return 0


def run_plot(args: argparse.Namespace) -> int:
    from fastppo.experiments.plot import plot_runs

    out = (
        Path(args.out)
        if args.out
        else (Path(args.run_dirs[0]) / "plot.png" if len(args.run_dirs) == 1 else Path("plot.png"))
    )
    print(f"fastppo: wrote {plot_runs(args.run_dirs, out, smooth=args.smooth)}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from fastppo.agents.export import export_onnx, onnx_signature

    path = export_onnx(args.run_dir, args.onnx, opset=args.opset)
    print(f"fastppo: wrote {path} ({onnx_signature(path)})")
    return 0
