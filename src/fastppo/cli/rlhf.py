"""``fastppo rlhf`` and ``fastppo dpo``. Flags are generated from the config dataclasses, so a
field's ``help`` is both its documentation and its ``--help`` line."""

from __future__ import annotations

import argparse
import types
from collections.abc import Callable
from dataclasses import MISSING, fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from fastppo.cli.flags import add_boolean_flag
from fastppo.config import coerce
from fastppo.errors import FastPPOError, install_extra
from fastppo.rlhf.config import (
    DataConfig,
    DPOConfig,
    DPOTrainerConfig,
    LRScheduleConfig,
    ModelConfig,
    MonitorConfig,
    PPOConfig,
    PreferenceDataConfig,
    RewardModelConfig,
    RewardModelTrainerConfig,
    RLHFConfig,
    RunConfig,
    SamplingConfig,
    validate_dpo,
    validate_ppo,
    validate_reward_model,
    validate_run,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance
    from transformers import PreTrainedTokenizerBase

ConfigT = TypeVar("ConfigT", bound="DataclassInstance")


def _argument_type(hint: Any) -> dict[str, Any]:
    """argparse keywords for a field's type: Literals become choices."""
    optional_args = (
        [a for a in get_args(hint) if a is not type(None)] if get_origin(hint) in (Union, types.UnionType) else None
    )
    base = optional_args[0] if optional_args else hint
    if get_origin(base) is Literal:
        return {"choices": get_args(base), "type": str}
    if get_origin(base) is tuple:  # repeatable, and each value a comma-separated list
        return {"action": "extend", "type": lambda text: [item for item in text.split(",") if item], "metavar": "A,B"}
    return {"type": base, "metavar": base.__name__.upper()}


def add_config_arguments(
    parser: argparse.ArgumentParser, cls: type, defaults: object | None = None, required: tuple[str, ...] = ()
) -> None:
    """One flag per field of dataclass ``cls``, in a group titled by its docstring's first paragraph."""
    summary = (cls.__doc__ or cls.__name__).strip().split("\n\n")[0]
    group = parser.add_argument_group(" ".join(summary.split()).rstrip("."))
    hints = get_type_hints(cls)
    for f in fields(cls):
        default = getattr(defaults, f.name) if defaults is not None else (None if f.default is MISSING else f.default)
        help_text = f.metadata["help"].replace("%", "%%")  # argparse formats help with %
        flag = "--" + f.name.replace("_", "-")
        if bool in (
            hints[f.name],
            *get_args(hints[f.name]),
        ):  # the spellings `fastppo train` takes: --x, --x false, --no-x
            add_boolean_flag(
                group,
                [flag],
                f.name,
                help_text,
                default,
                default,
                partial(coerce, annotation=hints[f.name], name=flag[2:]),
            )
            continue
        kwargs = _argument_type(hints[f.name])
        if f.name in required:
            kwargs.update(required=True, help=help_text)
        else:
            # extend appends to a copy of a list default; a tuple one has no append
            kwargs.update(
                default=list(default) if isinstance(default, tuple) else default,
                help=f"{help_text} (default: {default})",
            )
        group.add_argument(flag, dest=f.name, **kwargs)


def config_from_args(cls: type[ConfigT], args: argparse.Namespace) -> ConfigT:
    values = {f.name: getattr(args, f.name) for f in fields(cls)}
    return cls(**{name: tuple(value) if isinstance(value, list) else value for name, value in values.items()})


def _require_rlhf_extra() -> None:
    """Check the rlhf extra is installed; then silence transformers' loading bars (our progress
    bar and metrics are the run's output)."""
    import importlib.util

    missing = [name for name in ("transformers", "peft", "datasets") if importlib.util.find_spec(name) is None]
    if missing:
        raise FastPPOError(f"{', '.join(missing)} not installed: {install_extra('rlhf')}")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _chat_tokenizer(data: DataConfig, model: str) -> PreTrainedTokenizerBase | None:
    """With --chat-template, the tokenizer whose template renders conversational data."""
    if not data.chat_template:
        return None
    from fastppo.rlhf.models import load_tokenizer

    return load_tokenizer(model)


def _check_start(model: ModelConfig, run: RunConfig, command: str) -> None:
    """The device and the output folder (new and empty, or a checkpoint to resume), checked before
    any data or model is read; the trainers check them again for callers of their API."""
    from fastppo.devices import resolve_device
    from fastppo.rlhf.checkpoint import resume_point

    resolve_device(model.device)
    resume_point(Path(run.output_dir), run.resume, command)


def run_rlhf(args: argparse.Namespace) -> int:
    _require_rlhf_extra()
    from fastppo.devices import resolve_device
    from fastppo.rlhf.data import Conversations, read_prompt_column
    from fastppo.rlhf.rewards import load_reward
    from fastppo.rlhf.trainer import train
    from fastppo.training.distributed import launched_rank, rank_device

    cfg = RLHFConfig(
        model=config_from_args(ModelConfig, args),
        sampling=config_from_args(SamplingConfig, args),
        ppo=config_from_args(PPOConfig, args),
        run=config_from_args(RunConfig, args),
        schedule=config_from_args(LRScheduleConfig, args),
        monitor=config_from_args(MonitorConfig, args),
    )
    validate_ppo(cfg.model, cfg.sampling, cfg.ppo)  # before any loading: bad flags fail in milliseconds
    validate_run(cfg.run, cfg.schedule, cfg.monitor, cfg.ppo.steps)
    _check_start(cfg.model, cfg.run, "rlhf")
    data = config_from_args(DataConfig, args)
    tokenizer = _chat_tokenizer(data, cfg.model.model)
    columns = [read_prompt_column(args.prompts, "--prompts", data)] + (
        [read_prompt_column(args.eval_prompts, "--eval-prompts", data)] if args.eval_prompts else []
    )
    rendered = [column.render(tokenizer) for column in columns]
    prompts, eval_prompts = rendered[0], (rendered[1] if args.eval_prompts else None)
    conversations = Conversations(columns, rendered) if data.chat_template else None
    reward_fn = load_reward(args.reward, rank_device(resolve_device(cfg.model.device)), conversations=conversations)
    history = train(cfg, reward_fn, prompts, eval_prompts)
    if history and launched_rank() == 0:
        first, last = history[0], history[-1]
        held_out = (
            f"held-out reward (greedy, --eval-prompts) {last['eval/reward_mean']:.3f}, "
            if "eval/reward_mean" in last
            else ""
        )
        print(
            f"reward {first['rlhf/reward_mean']:.3f} -> {last['rlhf/reward_mean']:.3f}, {held_out}"
            f"KL to reference {first['rlhf/kl_ref']:.3f} -> {last['rlhf/kl_ref']:.3f}; outputs in {cfg.run.output_dir}"
        )
    return 0


def run_dpo(args: argparse.Namespace) -> int:
    _require_rlhf_extra()
    from fastppo.rlhf.data import read_preferences
    from fastppo.rlhf.dpo import train_dpo
    from fastppo.training.distributed import launched_rank

    cfg = DPOTrainerConfig(
        model=config_from_args(ModelConfig, args),
        dpo=config_from_args(DPOConfig, args),
        run=config_from_args(RunConfig, args),
        schedule=config_from_args(LRScheduleConfig, args),
    )
    validate_dpo(cfg.model, cfg.dpo)
    validate_run(cfg.run, cfg.schedule)
    _check_start(cfg.model, cfg.run, "dpo")
    data = config_from_args(PreferenceDataConfig, args)
    pairs = read_preferences(args.data, data, _chat_tokenizer(data, cfg.model.model))
    history = train_dpo(cfg, pairs)
    if history and launched_rank() == 0:
        first, last = history[0], history[-1]
        print(
            f"DPO loss {first['dpo/loss']:.3f} -> {last['dpo/loss']:.3f}, margin {first['dpo/margin']:.3f} -> "
            f"{last['dpo/margin']:.3f}; outputs in {cfg.run.output_dir}"
        )
    return 0


def run_reward_model(args: argparse.Namespace) -> int:
    _require_rlhf_extra()
    from fastppo.rlhf.data import read_preferences
    from fastppo.rlhf.reward_model import train_reward_model

    cfg = RewardModelTrainerConfig(
        model=config_from_args(ModelConfig, args),
        reward_model=config_from_args(RewardModelConfig, args),
        run=config_from_args(RunConfig, args),
        schedule=config_from_args(LRScheduleConfig, args),
    )
    validate_reward_model(cfg.model, cfg.reward_model)
    validate_run(cfg.run, cfg.schedule)
    _check_start(cfg.model, cfg.run, "reward-model")
    data = config_from_args(PreferenceDataConfig, args)
    history = train_reward_model(cfg, read_preferences(args.data, data, _chat_tokenizer(data, cfg.model.model)))
    first, last = history[0], history[-1]
    accuracy = (
        f"held-out accuracy {first['reward_model/eval_accuracy']:.3f} -> {last['reward_model/eval_accuracy']:.3f}, "
        if "reward_model/eval_accuracy" in last
        else ""
    )
    print(f"{accuracy}reward model in {cfg.run.output_dir} (use it with fastppo rlhf --reward {cfg.run.output_dir})")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rlhf``, ``dpo`` and ``reward-model`` to the ``fastppo`` command line."""
    rlhf = subparsers.add_parser(
        "rlhf", help="fine-tune a causal LM from a reward with PPO, GRPO or RLOO", description=RLHFConfig.__doc__
    )
    rlhf.add_argument(
        "--reward",
        required=True,
        help="reward-model folder (sequence classification) or module:function returning one float per completion",
    )
    rlhf.add_argument(
        "--prompts",
        required=True,
        help="prompts: a .jsonl/.json/.parquet/.csv file, a folder of them or one written by save_to_disk, or a "
        "hub dataset",
    )
    rlhf.add_argument(
        "--eval-prompts",
        help="held-out prompts in the format of --prompts, completed greedily and scored every --eval-every steps",
    )
    add_config_arguments(rlhf, DataConfig)
    add_config_arguments(rlhf, ModelConfig, required=("model",))
    add_config_arguments(rlhf, SamplingConfig)
    add_config_arguments(rlhf, PPOConfig)
    add_config_arguments(rlhf, LRScheduleConfig)
    add_config_arguments(rlhf, MonitorConfig)
    add_config_arguments(rlhf, RunConfig)
    rlhf.set_defaults(func=run_rlhf)

    preference_command(
        subparsers, "dpo", "fine-tune a causal LM on preference pairs with DPO", DPOTrainerConfig, DPOConfig, run_dpo
    )
    preference_command(
        subparsers,
        "reward-model",
        "train a reward model (sequence classifier) on preference pairs for fastppo rlhf --reward",
        RewardModelTrainerConfig,
        RewardModelConfig,
        run_reward_model,
    )


def preference_command(
    subparsers: argparse._SubParsersAction,
    name: str,
    help: str,
    trainer_config: type[DataclassInstance],
    method_config: type,
    func: Callable[[argparse.Namespace], int],
) -> None:
    """A command that trains on preference pairs (dpo, reward-model): the data, model, method, lr
    schedule and run flags, with the run defaults of ``trainer_config``."""
    parser = subparsers.add_parser(name, help=help, description=trainer_config.__doc__)
    parser.add_argument(
        "--data",
        required=True,
        help="preference pairs: a .jsonl/.json/.parquet/.csv file, a folder of them or one written by "
        "save_to_disk, or a hub dataset",
    )
    add_config_arguments(parser, PreferenceDataConfig)
    add_config_arguments(parser, ModelConfig, required=("model",))
    add_config_arguments(parser, method_config)
    add_config_arguments(parser, LRScheduleConfig)
    run_defaults = trainer_config.__dataclass_fields__["run"].default_factory
    assert callable(run_defaults)  # every trainer config's run has a default factory
    add_config_arguments(parser, RunConfig, defaults=run_defaults())
    parser.set_defaults(func=func)
