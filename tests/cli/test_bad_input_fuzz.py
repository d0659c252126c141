"""Bad input, walked over every flag of every subcommand.

The parser is read programmatically (``fastppo.cli.main.build_parser``), so a new flag is fuzzed
without touching this file. Each option gets the bad values of its kind (wrong types and
out-of-range numbers, unknown choices, missing, folder-for-file, non-UTF-8 and unwritable paths);
each positional RUN_DIR gets missing, empty and damaged run folders; each required input is left
out once. Every case runs in this process on top of a base command line that succeeds in well
under a second, and must end either with exit code 0 (the value was fine) or with exit code 2 and
exactly one line on stderr that starts with ``fastppo: error:``: never a traceback, never exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import types
import typing
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fastppo.cli.main import build_parser, main
from fastppo.config import Config, field_index

Value = str | Callable[[Path], str]
"""A command-line value, or a maker that builds it (a file, a damaged run) in the case's folder."""
BARE = "<bare flag>"
"""The flag given without a value."""
OMITTED = "<omitted>"
"""A required input left out."""

NUMBERS = ["x", "[1]", "None", "1j", "-1", "0", "1e400", "nan", "inf", "", "1.5"]
BOOLEANS = ["maybe", "", "2", "None", "[1]"]
CHOICES = ["x", "", "None", "1"]
LISTS = ["x", "", "0", "-1", "1.5", "[1]", ",", "1j"]
OBJECTS = ["x", "[1]", "{", "null", "1", '{"no_such_kwarg": 1}']
SKIPPED_FLAGS = {"hp:run.compile"}
"""Flags whose accepted value is too slow to run per case (torch.compile: ~10 s); their bad values are still fuzzed."""

ALONE = {("train", "resume"): ["--no-progress"]}
"""Flags fuzzed without the base command line (which they refuse to go with), but with these."""
TINY_TRAIN = [
    "--total-timesteps",
    "16",
    "--num-envs",
    "1",
    "--num-steps",
    "16",
    "--num-minibatches",
    "1",
    "--update-epochs",
    "1",
    "--no-tensorboard",
    "--no-progress",
]


def write(path: Path, data: bytes | str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


NOT_UTF8 = b"\xff\xfe\x00\x9c not text \xc3\x28\n"


def named(label: str, make: Callable[[Path], str]) -> Callable[[Path], str]:
    make.__name__ = label
    return make


def label_of(value: Value) -> str:
    return value.__name__ if callable(value) else value if value in (BARE, OMITTED) else repr(value)


PATHS: list[Value] = [
    "",
    "[1]",
    named("<missing path>", lambda case: str(case / "no" / "such.yaml")),
    named("<a folder>", lambda case: str((case / "folder").resolve())),
    named("<non-UTF-8 .yaml>", lambda case: write(case / "bad.yaml", NOT_UTF8)),
    named("<non-UTF-8 .jsonl>", lambda case: write(case / "bad.jsonl", NOT_UTF8)),
    named("<YAML list>", lambda case: write(case / "list.yaml", "- 1\n- 2\n")),
    named("<broken YAML>", lambda case: write(case / "broken.yaml", "ppo: {learning_rate: [1\n")),
    named(
        "<YAML of wrong types>",
        lambda case: write(
            case / "types.yaml", "ppo:\n  num_steps: [1]\n  learning_rate: {a: 1}\nenv:\n  num_envs: null\n"
        ),
    ),
    "/proc/no/such/place",
]
OUTPUTS: list[Value] = [
    "",
    "[1]",
    named("<missing folders>", lambda case: str(case / "new" / "folders" / "out.png")),
    named("<a folder>", lambda case: str((case / "folder").resolve())),
    named("<below a file>", lambda case: write(case / "file.txt", "x") + "/out.png"),
    "/proc/no/such/place",
]
"""Values for a flag that names what a command writes."""
OUTPUT_FLAGS = {"out", "onnx", "run_dir", "output_dir"}


@dataclass
class Artefacts:
    """What the base command lines read: a trained run, a tiny language model, prompts and pairs."""

    run: Path
    model: Path | None
    prompts: Path
    pairs: Path


def run_folders(artefacts: Artefacts) -> list[Value]:
    """Values for a RUN_DIR: missing, empty and damaged copies of the trained run."""

    def damaged(label: str, damage: Callable[[Path], None]) -> Callable[[Path], str]:
        def make(case: Path) -> str:
            run = case / "damaged-run"
            shutil.copytree(artefacts.run, run)
            damage(run)
            return str(run)

        return named(label, make)

    def metrics_middle(run: Path) -> None:
        lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
        (run / "metrics.jsonl").write_text(lines[0] + '{"global_step": 3, "charts/episo\n' + "".join(lines[1:]))

    def in_parent(run: Path) -> None:
        shutil.move(str(run), str(run.parent / "runs" / "seed_1"))
        run.mkdir()

    def agent_json(run: Path, text: str) -> None:
        (run / "agent.json").write_text(text)
        for checkpoint in (run / "checkpoints").glob("*/agent.json"):
            checkpoint.write_text(text)

    return [
        "",
        named("<missing run>", lambda case: str(case / "no-such-run")),
        named("<empty folder>", lambda case: str((case / "folder").resolve())),
        named("<a file>", lambda case: write(case / "file.txt", "x")),
        damaged("<agent.json not JSON>", lambda run: agent_json(run, "{not json")),
        damaged("<agent.json not UTF-8>", lambda run: agent_json(run, NOT_UTF8.decode("latin-1"))),
        damaged("<agent.json a list>", lambda run: agent_json(run, "[1, 2]")),
        damaged("<config.yaml not UTF-8>", lambda run: write(run / "config.yaml", NOT_UTF8)),
        damaged("<config.yaml a list>", lambda run: write(run / "config.yaml", "- 1\n")),
        damaged("<metrics.jsonl damaged mid-file>", metrics_middle),
        damaged(
            "<metrics.jsonl not UTF-8>",
            lambda run: write(run / "metrics.jsonl", (run / "metrics.jsonl").read_bytes()[:40] + NOT_UTF8),
        ),
        damaged("<metrics.jsonl of lists>", lambda run: write(run / "metrics.jsonl", "[1]\n[2]\n")),
        damaged(
            "<metrics.jsonl a folder>", lambda run: ((run / "metrics.jsonl").unlink(), (run / "metrics.jsonl").mkdir())
        ),
        damaged("<weights truncated>", lambda run: [write(p, p.read_bytes()[:50]) for p in run.rglob("*.safetensors")]),
        damaged("<weights not safetensors>", lambda run: [write(p, NOT_UTF8) for p in run.rglob("*.safetensors")]),
        damaged("<folder of runs, one damaged>", in_parent),
    ]


ENV_IDS: list[Value] = [
    "", "NoSuchEnv-v0", "x:y", "nosuchmodule:Env", "1j", "[1]", "pz:nosuch_v0", "pz:x:y", "pz:none.py:make_env",
    "pz:pettingzoo.classic.tictactoe_v3", named("<missing file.py:Env>", lambda case: f"{case / 'none.py'}:Env"),
    named("<non-UTF-8 file.py:Env>", lambda case: write(case / "bad_env.py", NOT_UTF8) + ":Env"),
    named("<file.py:NotAnEnv>", lambda case: write(case / "not_env.py", "class NotAnEnv:\n    pass\n") + ":NotAnEnv"),
]  # fmt: skip

EXTRA: dict[tuple[str, str], list[Value]] = {
    ("train", "hp:run.device"): ["mps", "meta", "cuda", "cuda:99", "xla", "tpu"],
    ("sweep", "hp:run.device"): ["mps", "meta"],
    ("rlhf", "device"): ["mps", "meta", "cuda:99"],
    ("plot", "out"): ["p.xyz", "p"],
    ("record", "out"): ["v.txt", "v"],
    ("export", "onnx"): ["m.txt"],
}
"""Values for particular flags on top of those of their kind: devices this machine lacks, output
files of a type their writer cannot write."""


def values_for(command: str, action: argparse.Action, artefacts: Artefacts) -> list[Value]:
    """The bad values of ``action``'s kind, then its extras."""
    extra = EXTRA.get((command, action.dest), [])
    if action.dest == "env_id":
        return ENV_IDS + extra
    if action.metavar == "RUN_DIR" and not action.option_strings:
        return run_folders(artefacts) + extra
    if action.nargs == 0:
        return [BARE] + extra
    if action.metavar == "RUN_DIR":
        return run_folders(artefacts) + extra
    annotation: typing.Any = None
    if action.dest.startswith("hp:"):
        section, f = field_index(Config())[action.dest.removeprefix("hp:")]
        annotation = typing.get_type_hints(type(section))[f.name]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    if action.nargs == "?" or annotation is bool:
        return [*BOOLEANS, BARE] + extra
    if action.choices or typing.get_origin(annotation) is typing.Literal:
        return CHOICES + extra
    if isinstance(action, argparse._ExtendAction) or typing.get_origin(annotation) is tuple:
        return LISTS + extra
    if typing.get_origin(annotation) is dict:
        return OBJECTS + extra
    if action.type not in (None, str) or annotation in (int, float):
        return NUMBERS + extra
    return (OUTPUTS if action.dest in OUTPUT_FLAGS else PATHS) + extra


def base_command(command: str, artefacts: Artefacts) -> list[Value]:
    """A command line that succeeds quickly (the case's folder receives every output)."""
    run = named("<trained run>", lambda case: str(shutil.copytree(artefacts.run, case / "run")))
    model, prompts, pairs = str(artefacts.model), str(artefacts.prompts), str(artefacts.pairs)

    def out(name: str) -> Callable[[Path], str]:
        return named(f"<{name}>", lambda case: str(case / name))

    return {
        "train": ["CartPole-v1", *TINY_TRAIN, "--run-dir", out("train-run")],
        # --trials 0 with no sweep.db there: every input is checked, then exit 2 before any trial.
        "sweep": ["CartPole-v1", "--trials", "0", "--run-dir", out("sweep"), *TINY_TRAIN],
        "eval": [run, "--episodes", "1"],
        "record": [run, "--out", out("video.mp4")],
        "plot": [run, "--out", out("plot.png")],
        "export": [run, "--onnx", out("policy.onnx")],
        "play": [run],  # a CartPole run: refused before any input is read (a game's run would wait for typed moves)
        "report": [run, "--out", out("report"), "--reps", "10"],
        "rlhf": ["--model", model, "--reward", "tests.support.tiny_lm:early_letters", "--prompts", prompts,
                 "--steps", "1", "--prompts-per-step", "2", "--num-generations", "2", "--mini-batch-size", "2",
                 "--ppo-epochs", "1", "--max-new-tokens", "4", "--output-dir", out("rlhf"), "--no-progress"],
        "dpo": ["--model", model, "--data", pairs, "--batch-size", "1", "--output-dir", out("dpo"), "--no-progress"],
        "reward-model": ["--model", model, "--data", pairs, "--batch-size", "1", "--output-dir", out("reward-model"),
                         "--no-progress"],
    }[command]  # fmt: skip


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def split_base(parser: argparse.ArgumentParser, base: list[Value]) -> tuple[list[Value], list[tuple[str, list[Value]]]]:
    """The base line as (positionals, [(dest, its tokens)]), so a fuzzed flag replaces its own dest."""
    positionals: list[Value] = []
    options: list[tuple[str, list[Value]]] = []
    tokens = iter(base)
    for token in tokens:
        action = parser._option_string_actions.get(token) if isinstance(token, str) else None
        if action is None:
            positionals.append(token)
        else:
            options.append((action.dest, [token] if action.nargs == 0 else [token, next(tokens)]))
    return positionals, options


@dataclass
class Case:
    command: str
    dest: str
    flag: str  # the option string, or the positional's metavar
    value: Value  # or BARE, OMITTED
    argv: list[Value]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.command, self.flag, label_of(self.value))

    @property
    def slow(self) -> bool:
        """The language-model commands (each accepted value fine-tunes a model) and the sweep's
        hyperparameter flags (the very flags and code of train's, fuzzed by default there)."""
        return self.command in ("rlhf", "dpo", "reward-model") or (
            self.command == "sweep" and self.dest.startswith("hp:")
        )


def cases(artefacts: Artefacts) -> list[Case]:
    """Every option and positional of every subcommand with each of its bad values (and left out
    when required), on top of the command's base line; plus --help once per command."""
    found = []
    for command, parser in subcommands().items():
        positionals, options = split_base(parser, base_command(command, artefacts))
        for action in parser._actions:
            if (
                isinstance(action, argparse._HelpAction)
                or action.help == argparse.SUPPRESS
                or action.dest in SKIPPED_FLAGS
            ):
                continue
            flag = action.option_strings[0] if action.option_strings else action.metavar
            others = [token for dest, tokens in options if dest != action.dest for token in tokens]
            if (command, action.dest) in ALONE:
                positionals_here, others = [], ALONE[(command, action.dest)]
            else:
                positionals_here = positionals
            for value in values_for(command, action, artefacts) + ([OMITTED] if action.required else []):
                if (
                    not action.option_strings
                ):  # a positional (RUN_DIR or ENV_ID, the base's first): replaced, or left out
                    found.append(
                        Case(
                            command,
                            action.dest,
                            flag,
                            value,
                            [command, *([] if value == OMITTED else [value]), *positionals[1:], *others],
                        )
                    )
                elif value == OMITTED:
                    found.append(Case(command, action.dest, flag, value, [command, *positionals_here, *others]))
                else:
                    found.append(
                        Case(
                            command,
                            action.dest,
                            flag,
                            value,
                            [command, *positionals_here, *others, flag, *([] if value == BARE else [value])],
                        )
                    )
        found.append(Case(command, "help", "--help", BARE, [command, "--help"]))
    return found


@dataclass
class Outcome:
    code: int | None
    stderr: str
    error: str | None  # the last line of an exception's traceback

    @property
    def good(self) -> bool:
        if self.error is not None:
            return False
        lines = self.stderr.strip().splitlines()
        return self.code == 0 or (self.code == 2 and len(lines) == 1 and lines[0].startswith("fastppo: error: "))

    def describe(self) -> str:
        return self.error or f"exit {self.code}, stderr: {self.stderr.strip()[-400:]!r}"


def run_case(case: Case, folder: Path) -> Outcome:
    """``fastppo`` on the case's argv in this process, from inside ``folder``; the process-wide
    state a command may change (cwd, torch threads and flags) is put back afterwards."""
    folder.mkdir(parents=True)
    (folder / "folder").mkdir()
    argv = [token(folder) if callable(token) else token for token in case.argv]
    state = (
        os.getcwd(),
        torch.get_num_threads(),
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
    )
    stdout, stderr = io.StringIO(), io.StringIO()
    os.chdir(folder)
    try:
        # In one process a warning shows once per place: they are left out of the one-line count.
        with (
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
            warnings.catch_warnings(record=True),
        ):
            try:
                code = main(argv)
            except SystemExit as exc:  # --help
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            except Exception as exc:  # the fuzzer's whole point: any other exception is a finding
                return Outcome(
                    None, stderr.getvalue(), f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                )
        return Outcome(code, stderr.getvalue(), None)
    finally:
        os.chdir(state[0])
        torch.set_num_threads(state[1])
        torch.set_default_dtype(state[2])
        torch.use_deterministic_algorithms(state[3])


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory) -> Artefacts:
    root = tmp_path_factory.mktemp("fuzz-inputs")
    run = root / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", "CartPole-v1", "--total-timesteps", "256", "--num-envs", "2", "--num-steps", "64",
                     "--num-minibatches", "2", "--update-epochs", "1", "--no-tensorboard", "--no-progress",
                     "--checkpoint-every", "1", "--run-dir", str(run)]) == 0  # fmt: skip
    model = None
    try:
        from tests.support.tiny_lm import build_model_folder

        model = build_model_folder(root / "tiny-lm")
    except ImportError:  # no rlhf extra: its commands refuse in one line, which is fuzzed as well
        pass
    prompts = Path(write(root / "prompts.jsonl", "\n".join(json.dumps({"prompt": p}) for p in ("hi", "abc"))))
    pairs = Path(write(root / "pairs.jsonl", json.dumps({"prompt": "hi", "chosen": "aa", "rejected": "zz"}) + "\n"))
    return Artefacts(run, model, prompts, pairs)


def test_every_flag_of_every_command_refuses_bad_input_in_one_line(artefacts, tmp_path, capsys) -> None:
    fuzz([case for case in cases(artefacts) if not case.slow], tmp_path, capsys)


@pytest.mark.slow
def test_every_flag_of_every_command_refuses_bad_input_in_one_line_slow_part(artefacts, tmp_path, capsys) -> None:
    fuzz([case for case in cases(artefacts) if case.slow], tmp_path, capsys)


def fuzz(all_cases: list[Case], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Run ``all_cases``, print the counts, and fail with every case that broke the rule."""
    failures = []
    accepted = refused = 0
    for index, case in enumerate(all_cases):
        outcome = run_case(case, tmp_path / f"case{index}")
        if outcome.good:
            accepted += outcome.code == 0
            refused += outcome.code == 2
        else:
            shown = [label_of(t) if callable(t) else t for t in case.argv]
            failures.append(f"{case.key}: fastppo {' '.join(map(str, shown))}\n    -> {outcome.describe()}")
    flags = {(c.command, c.flag) for c in all_cases}
    with capsys.disabled():
        print(
            f"\nbad-input fuzz: {len(all_cases)} command lines over {len(flags)} flags and inputs of "
            f"{len({c.command for c in all_cases})} subcommands: "
            f"{accepted} accepted (exit 0), {refused} refused in one line (exit 2), {len(failures)} failures"
        )
    assert not failures, "\n".join(failures)
