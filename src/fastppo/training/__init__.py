"""PPO training: the loop and what it drives (rollout, update, checkpoints, runs, distributed ranks, logging)."""
