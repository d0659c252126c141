"""A small reward model trained here by `fastppo reward-model` on a sentiment-style toy task.

    python benchmarks/reward_model_sentiment.py [--pairs 240] [--epochs 3]

Builds the random 2-layer GPT-2 of examples/rlhf_tiny.py, writes preference pairs whose prompt is a
film review opening and whose chosen / rejected completions are positive / negative phrases
(words drawn at random, so no completion repeats), runs `fastppo reward-model` on them with 20% of
the pairs held out, and prints the held-out accuracy before and after training and the wall time.
The output folder is a reward for `fastppo rlhf --reward` (the benchmarks' RLHF curves use it).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.rlhf_tiny import build  # noqa: E402

SUBJECTS = ["the film", "this movie", "the plot", "the acting", "the ending", "the score", "the cast", "the story"]
POSITIVE = ["great", "lovely", "superb", "moving", "brilliant", "fun", "warm", "clever", "fresh", "gripping"]
NEGATIVE = ["awful", "dull", "boring", "weak", "bland", "clumsy", "stale", "silly", "flat", "tedious"]


def pairs(count: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)

    def phrase(words: list[str]) -> str:
        return f" was {rng.choice(words)} and {rng.choice(words)}"

    return [
        {"prompt": f"{rng.choice(SUBJECTS)}", "chosen": phrase(POSITIVE), "rejected": phrase(NEGATIVE)}
        for _ in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=240)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--output-dir", default=None, help="where the reward model goes (default: a temporary folder)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rm-sentiment-"))
    output = Path(args.output_dir) if args.output_dir else work / "rm"
    build(work / "base")
    data = work / "pairs.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in pairs(args.pairs, seed=0)))
    command = [sys.executable, "-m", "fastppo", "reward-model", "--model", str(work / "base"), "--data", str(data),
               "--output-dir", str(output), "--eval-split", "0.2", "--eval-every", "10", "--epochs", str(args.epochs),
               "--batch-size", "16", "--learning-rate", "1e-3", "--max-length", "64", "--device", "cpu",
               "--no-progress"]  # fmt: skip
    print(" ".join(command[2:]).replace(str(work), "$WORK"))
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    evals = [
        (row["global_step"], row["reward_model/eval_accuracy"], row["reward_model/eval_loss"])
        for row in rows
        if "reward_model/eval_accuracy" in row
    ]
    for step, accuracy, loss in evals:
        print(f"step {step:3d}: held-out accuracy {accuracy:.3f}, loss {loss:.3f}")
    print(f"{len(rows) - 1} steps of 16 pairs in {wall:.1f} s wall (process start and model build included)")


if __name__ == "__main__":
    main()
