"""Where completions come from: transformers' ``generate`` on the policy itself (``--generator hf``)
or a vLLM engine holding a copy of the policy's weights (``--generator vllm``).

Either way only the sampled token ids are used: the rollout rescores them with the trainer's own
forward pass (``collect_rollout``), so PPO's old log-probs never depend on the generator's numerics.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol, cast

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from transformers import AutoConfig, GenerationConfig, GenerationMixin, StopStringCriteria

from fastppo.errors import FastPPOError
from fastppo.rlhf.config import ModelConfig, SamplingConfig
from fastppo.rlhf.models import Models
from fastppo.rlhf.tokens import Stops

Autocast = Callable[[], AbstractContextManager]


class Generator(Protocol):
    def generate(self, query: Tensor, query_mask: Tensor, greedy: bool = False) -> Tensor:
        """[B, R] new token ids after the left-padded prompts ``query`` [B, P]: sampled with the run's
        SamplingConfig, or the most likely token at each step with ``greedy``. Anything may follow EOS."""
        ...

    def sync_weights(self) -> None:
        """Make the next ``generate`` use the policy's current weights (called after every update)."""
        ...


class HFGenerator:
    """``policy.generate``: the trained module itself, so always in sync."""

    def __init__(self, models: Models, sampling: SamplingConfig, autocast: Autocast):
        self.models, self.sampling, self.autocast = models, sampling, autocast
        strings = list(Stops.of(models.tokenizer, sampling.stop).strings)
        try:  # transformers prepares stop strings at the first generate; here, so a bad one is refused before training
            if strings:
                StopStringCriteria(models.tokenizer, strings)
        except ValueError:
            raise FastPPOError(
                f"--stop {','.join(map(repr, strings))}: this tokenizer has no tokens that spell it (characters "
                "outside its vocabulary): pick stop strings made of text it knows"
            ) from None

    def generate(self, query: Tensor, query_mask: Tensor, greedy: bool = False) -> Tensor:
        tokenizer, policy, sampling = self.models.tokenizer, self.models.policy, self.sampling
        decoding = (
            {"do_sample": False}
            if greedy
            else {
                "do_sample": True,
                "temperature": sampling.temperature,
                "top_k": sampling.top_k,
                "top_p": sampling.top_p,
            }
        )
        # Stopping a row early only saves work: the rollout cuts every response at its stop (Stops.mask).
        stops = Stops.of(tokenizer, sampling.stop)
        generation = GenerationConfig(
            **decoding,
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=list(stops.token_ids),
            stop_strings=list(stops.strings) or None,
            pad_token_id=tokenizer.pad_token_id,
        )
        # Eval mode keeps the KV cache, which gradient checkpointing turns off in train mode; dropout is
        # off, so both modes sample the same distribution.
        policy.eval()
        with torch.no_grad(), self.autocast():
            # the policy is a causal LM (or peft's wrapper of one), which generates; its type does not say so
            sequences = cast(GenerationMixin, policy).generate(
                input_ids=query, attention_mask=query_mask, generation_config=generation, tokenizer=tokenizer
            )
        policy.train()
        return sequences[:, query.shape[1] :]

    def sync_weights(self) -> None:
        pass  # generation runs on the weights being trained


VLLM_DTYPES = {"auto": "auto", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


class VLLMGenerator:
    """A vLLM engine in this process (colocated with the trainer on the same GPU, as TRL's
    ``vllm_mode="colocate"``), loaded from ``--model`` and given the policy's weights at start (a
    resumed run's) and after every update.

    Written against vLLM 0.11 (V1 engine): ``LLM.apply_model`` (vLLM >= 0.8.3) runs a function on the
    engine's model, whose ``load_weights`` takes (name, tensor) pairs named as in the transformers
    checkpoint, as TRL's colocate mode does (through ``llm_engine.model_executor.driver_worker.
    model_runner.model`` on the older V0 engine). NOT RUN AGAINST vLLM: fastppo's test machines have
    no GPU and never install vLLM; tests/rlhf/test_monitoring.py checks the calls made and the tensors
    handed over against a stand-in module, and the errors of ``require_vllm``.
    """

    def __init__(self, models: Models, model_cfg: ModelConfig, sampling: SamplingConfig, seed: int):
        # The engine core in this process rather than a child: apply_model's function and the weights
        # it loads are then passed by reference instead of being pickled to another process.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        self.models, self.sampling = models, sampling
        self.llm = LLM(
            model=model_cfg.model,
            dtype=VLLM_DTYPES[model_cfg.dtype],
            seed=seed,
            gpu_memory_utilization=sampling.vllm_gpu_memory,
            max_model_len=sampling.max_prompt_length + sampling.max_new_tokens,
        )
        # load_models may have grown the embeddings for an added pad token, which the engine's
        # checkpoint-sized vocabulary does not have (and never samples): those rows are not synced.
        self.vocab_size = AutoConfig.from_pretrained(model_cfg.model).vocab_size
        self.sync_weights()

    def generate(self, query: Tensor, query_mask: Tensor, greedy: bool = False) -> Tensor:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        tokenizer, sampling = self.models.tokenizer, self.sampling
        params = SamplingParams(
            n=1,
            temperature=0.0 if greedy else sampling.temperature,  # vLLM decodes greedily at temperature 0
            top_k=sampling.top_k or -1,  # vLLM's "off" is -1 in older releases (0 also accepted in newer ones)
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            stop_token_ids=list(Stops.of(tokenizer, sampling.stop).token_ids),  # stop strings are cut by the rollout
            detokenize=False,  # the rollout decodes the ids itself
        )
        prompts = [TokensPrompt(prompt_token_ids=row[mask.bool()].tolist()) for row, mask in zip(query, query_mask)]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        rows = [torch.tensor(list(out.outputs[0].token_ids), dtype=torch.long) for out in outputs]
        return pad_sequence(rows, batch_first=True, padding_value=tokenizer.pad_token_id).to(query.device)

    def sync_weights(self) -> None:
        grown = len(self.models.tokenizer)  # rows of the embeddings and LM head after load_models' pad token
        weights = [
            (name, tensor[: self.vocab_size] if grown > self.vocab_size and tensor.shape[0] == grown else tensor)
            for name, tensor in self.models.policy.state_dict().items()
        ]
        self.llm.apply_model(lambda model: model.load_weights(weights))
        self.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights


def make_generator(
    models: Models, model_cfg: ModelConfig, sampling: SamplingConfig, seed: int, autocast: Autocast
) -> Generator:
    if sampling.generator == "vllm":
        return VLLMGenerator(models, model_cfg, sampling, seed)
    return HFGenerator(models, sampling, autocast)
