"""PPO, GRPO, RLOO and DPO for causal language models with Hugging Face transformers.

``fastppo rlhf`` / :func:`fastppo.rlhf.trainer.train` fine-tune a policy from a reward;
``fastppo dpo`` / :func:`fastppo.rlhf.dpo.train_dpo` from preference pairs. Needs the ``rlhf``
extra (transformers, peft).
"""
