"""The search space of ``fastppo sweep``: which config fields a sweep tunes and the distribution
each is drawn from.

A space is YAML laid out as a preset (sections, then fields) with a distribution where a preset
has a value: ``{float: [low, high]}`` (``log: true``, ``step: s``), ``{int: [low, high]}`` or
``{choices: [...]}``. The default ships as ``sweep_space.yaml`` beside this module (its header
documents the format); ``--space FILE`` replaces it. Every entry is checked against the config's
fields and types when the file is read, so a typo is one line before any trial runs.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from fastppo.config import Config, coerce, resolve_key, sections
from fastppo.errors import FastPPOError

DEFAULT_SPACE = Path(__file__).with_name("sweep_space.yaml")
OPTIONS = {"float": {"log", "step"}, "int": {"log", "step"}, "choices": set()}
"""Each distribution's keyword and the options it takes."""
FORMAT = "{float: [low, high]} or {int: [low, high]} (log: true or step: s optional), or {choices: [a, b, ...]}"


def load_space(path: str | Path | None = None) -> dict[str, BaseDistribution]:
    """'section.field' -> its Optuna distribution, from ``path`` (default: the shipped space)."""
    source = Path(path) if path is not None else DEFAULT_SPACE
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FastPPOError(f"cannot read --space {source}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise FastPPOError(f"--space {source} is not UTF-8 text (byte {exc.start}): give a YAML search space") from None
    except yaml.YAMLError as exc:
        raise FastPPOError(f"--space {source} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or not data or not all(isinstance(fields, dict) for fields in data.values()):
        raise FastPPOError(
            f"--space {source} must map sections to fields, e.g. 'ppo: {{learning_rate: {{float: [1.0e-5, "
            "1.0e-2], log: true}}'"
        )
    config = Config()
    space = {}
    for section, fields in data.items():
        for name, entry in fields.items():
            try:
                key = resolve_key(config, f"{section}.{name}")
                if key.startswith("run.") or key == "env.env_id":
                    raise FastPPOError(
                        f"{key} is not a hyperparameter a sweep tunes (env, ppo, policy and multi_agent fields are)"
                    )
                section_name, field_name = key.split(".", 1)  # as resolved: 'learning-rate' is ppo.learning_rate
                space[key] = distribution(
                    key, entry, typing.get_type_hints(type(sections(config)[section_name]))[field_name]
                )
            except FastPPOError as exc:
                raise FastPPOError(f"--space {source}: {exc}") from None
    return space


def distribution(key: str, entry: Any, annotation: Any) -> BaseDistribution:
    """The distribution ``entry`` names for the field ``key`` of type ``annotation``."""
    kinds = [kind for kind in OPTIONS if isinstance(entry, dict) and kind in entry]
    if len(kinds) != 1 or set(entry) - {kinds[0], *OPTIONS[kinds[0]]}:
        raise FastPPOError(f"{key}: expected {FORMAT}, got {entry!r}")
    kind, values = kinds[0], entry[kinds[0]]
    if kind == "choices":
        if not isinstance(values, list) or not values:
            raise FastPPOError(f"{key}: choices must be a non-empty list, got {values!r}")
        # Optuna stores only scalars: a list choice ([64, 64]) is drawn as its text '64,64', which the config
        # reads back.
        choices = tuple(",".join(map(str, c)) if isinstance(c, list) else c for c in values)
        for choice in choices:
            coerce(choice, annotation, key)
        return CategoricalDistribution(choices)
    numeric = {int, float} & {annotation, *typing.get_args(annotation)}
    if not numeric or (kind == "float" and numeric == {int}):
        raise FastPPOError(
            f"{key} is {'an integer' if numeric else 'not a number'}: give it "
            f"{'{int: [low, high]} or ' if numeric else ''}{{choices: [...]}}"
        )
    number = int if kind == "int" else (int, float)
    if not (
        isinstance(values, list)
        and len(values) == 2
        and all(isinstance(v, number) and not isinstance(v, bool) for v in values)
    ):
        raise FastPPOError(
            f"{key}: {kind} expects [low, high] ({'integers' if kind == 'int' else 'numbers'}), got {values!r}"
        )
    try:
        return (FloatDistribution if kind == "float" else IntDistribution)(
            *values, **{option: entry[option] for option in OPTIONS[kind] if option in entry}
        )
    except (TypeError, ValueError) as exc:
        raise FastPPOError(f"{key}: {exc}") from None


def suggest(trial: optuna.Trial, space: dict[str, BaseDistribution]) -> dict[str, Any]:
    """Draw every field of ``space`` in ``trial``, as overrides for ``config.apply_overrides``."""
    values: dict[str, Any] = {}
    for key, d in space.items():
        if isinstance(d, FloatDistribution):
            values[key] = trial.suggest_float(key, d.low, d.high, step=d.step, log=d.log)
        elif isinstance(d, IntDistribution):
            values[key] = trial.suggest_int(key, d.low, d.high, step=d.step, log=d.log)
        else:
            values[key] = trial.suggest_categorical(key, d.choices)  # type: ignore[attr-defined]
    return values
