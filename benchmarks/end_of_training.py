"""Where each seed of a ``--seeds`` run folder ended: the mean of its last 20 training episodes
(its final checkpoint's) and of a deterministic evaluation, and how many seeds end solved by each.
A preset is judged here, at the end of training, never by the first time a seed touched the target.

    fastppo train CartPoleNoVelocity-v1 --backend tensor --seeds 1-10 --run-dir runs/nov
    python end_of_training.py runs/nov --solved 475            # 10 deterministic episodes, env seed 0
"""

from __future__ import annotations

import argparse
import json
import statistics

from common import SOLVED_RETURN, footer, header, positive
from fastppo.api import evaluate
from fastppo.files.run_folder import find_checkpoint, seed_folders

LAST = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a --seeds folder (RUN_DIR/seed_<n>)")
    parser.add_argument(
        "--solved",
        type=float,
        default=SOLVED_RETURN,
        help=f"the return that counts as solved (default {SOLVED_RETURN:.0f})",
    )
    parser.add_argument(
        "--episodes", type=positive, default=10, help="deterministic evaluation episodes per seed (default 10)"
    )
    parser.add_argument("--eval-seed", type=int, default=0, help="env seed of the evaluation (default 0)")
    args = parser.parse_args()
    seeds = seed_folders(args.run_dir)
    if not seeds:
        parser.error(f"{args.run_dir} holds no seed_<n> folders: train with --seeds")
    header(f"end of training of {args.run_dir}: last {LAST} training episodes and a deterministic evaluation")
    last, evaluated = [], []
    print(
        f"| seed | steps | last {LAST} episodes | deterministic eval ({args.episodes} episodes, seed "
        f"{args.eval_seed}) |\n|---|---|---|---|"
    )
    for folder in seeds:
        meta = json.loads((find_checkpoint(folder) / "trainer.json").read_text())
        last.append(statistics.fmean(meta["episode_returns"][-LAST:]))
        evaluated.append(evaluate(folder, episodes=args.episodes, deterministic=True, seed=args.eval_seed).mean_return)
        print(
            f"| {folder.name.removeprefix('seed_')} | {meta['global_step']} | {last[-1]:.1f} | {evaluated[-1]:.1f} |",
            flush=True,
        )
    ends = sum(value >= args.solved for value in last)
    evals = sum(value >= args.solved for value in evaluated)
    print(f"\n{ends}/{len(seeds)} seeds end with their last {LAST} episodes >= {args.solved:g} (min {min(last):.1f}); "
          f"{evals}/{len(seeds)} evaluate >= {args.solved:g} deterministically (min {min(evaluated):.1f})")  # fmt: skip
    footer()


if __name__ == "__main__":
    main()
