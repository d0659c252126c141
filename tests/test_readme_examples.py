"""Every command of the README runs as a new user would type it, in README order, in a fresh folder,
on a short budget (``short_budget``: each training cut to one update once its config is built and
checked as written, so a budget smaller than one batch still fails, and one that as written gives
too few updates to learn fails here too).

The blocks are read generically: every ```bash line (``\\`` continuations joined), every ``$ ``
line of a plain ``` block (its output shown below it: an error line must be the one printed), and
every ```python block. A ``fastppo`` line runs in this process through the CLI's ``main`` with the
arguments the shell would give it (a process each would spend most of the test importing torch);
any other line runs in bash. A command is skipped only by a rule of ``SKIPPED``, which says why;
on a machine without a GPU, ``--device cuda`` runs on the CPU instead (``ON_CPU``)."""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import shlex
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import fastppo.api
import fastppo.train_cli
import fastppo.trainer
import fastppo.training.resume
from fastppo.cli import main

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"

SKIPPED = (
    (r"^make ", "builds a fresh .venv and installs packages from the network; the test suite is what `make test` runs"),
    (r"^pip install", "installs packages from the network"),
    (r"^tensorboard ", "starts a server that runs until stopped"),
    (r"^torchrun ", "several processes under torchrun: tests/test_distributed.py and tests/rlhf/test_distributed.py run them"),
    (r"^fastppo sweep ", "dozens of trials (minutes): tests/test_sweep.py runs the command"),
    (r"runs/sweep_", "reads the output of the sweep skipped above"),
    (r"\./my-llm|\./big-llm|\./my-r|\bmy-rm\b|prompts\.(jsonl|parquet)|pairs\.jsonl|HuggingFaceH4/", "your own language model, reward model or data (or the hub's): tests/rlhf runs these commands on a tiny model"),
    (r"MyPOMDP-v0", "an env id your own package registers"),
)
"""(pattern, reason): the README commands this test does not run, and why."""

SLOW = ((r"^fastppo rlhf --model runs/tiny-gpt2", "trains a GPT-2 (minutes on 2 cores even for 2 steps)"),)
"""Run only with ``-m slow`` (``test_every_readme_command_runs_including_the_slow_ones``)."""

ON_CPU = ((r"--device cuda", "--device cpu"), (r'device="cuda"', 'device="cpu"'))
"""Without a GPU, these run on the CPU: the rest of the command (sizes, budget, env) is still checked."""

FIXTURES = {
    # What the README calls your own code: a TensorEnv (examples/point_reach.py's physics) and a gymnasium.Env.
    "my_sims.py": "from point_reach import PointReach\n\n\nclass Reacher(PointReach):\n    pass\n",
    "my_envs.py": '''import gymnasium as gym
import numpy as np


class GridWorld(gym.Env):
    """A walk on 0..4 that pays 1 at 4."""

    observation_space = gym.spaces.Box(0.0, 4.0, shape=(1,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.steps = 0, 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        self.position, self.steps = min(4, max(0, self.position + (1 if action else -1))), self.steps + 1
        done = self.position == 4
        return np.array([self.position], dtype=np.float32), float(done), done, self.steps >= 20, {}
''',
    "mypackage/__init__.py": "",
    "mypackage/envs.py": "from my_envs import GridWorld\n",
    "point_reach.py": (ROOT / "examples" / "point_reach.py").read_text(),
}


@dataclass
class Command:
    kind: str  # "shell": a ```bash line or a `$ ` line; "python": a ```python block
    text: str
    line: int  # where it starts in README.md
    shown: list[str] | None = None  # a `$ ` line's output as the README shows it


def readme_commands(text: str) -> list[Command]:
    """The README's commands in order (see the module's docstring)."""
    commands = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M):
        language, body, first = match[1], match[2], text.count("\n", 0, match.start(2)) + 1
        if language == "python":
            commands.append(Command("python", body, first))
        elif language == "bash":
            joined = re.sub(r"\\\n\s*", " ", body)
            lines = body.splitlines()
            offsets = [i for i, line in enumerate(lines) if i == 0 or not lines[i - 1].endswith("\\")]
            for offset, line in zip(offsets, joined.splitlines()):
                if line.strip() and not line.lstrip().startswith("#"):
                    commands.append(Command("shell", line.strip(), first + offset))
        elif language == "":
            lines = body.splitlines()
            for i, line in enumerate(lines):
                if line.startswith("$ "):
                    shown = list(itertools.takewhile(lambda l: not l.startswith("$ "), lines[i + 1 :]))
                    commands.append(Command("shell", line[2:], first + i, shown))
    return commands


def rule_for(command: Command, rules) -> str | None:
    first = command.text.splitlines()[0] if command.kind == "shell" else command.text
    return next((reason for pattern, reason in rules if re.search(pattern, first, re.M)), None)


UPDATES = 1
"""Updates each README training gets here (a resume: this many more at most)."""


@contextlib.contextmanager
def short_budget(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every run cut to ``UPDATES`` updates once its config is built and checked as written (a
    budget under one batch still fails as it would for a user), and failed where the budget as
    written gives too few updates to learn (``few_updates_warning``); a resume trains ``UPDATES``
    more at most; ``fastppo rlhf``/``dpo``/``reward-model`` take ``--steps`` up to ``UPDATES``."""
    as_written, resumed = fastppo.api.resolved_config, fastppo.training.resume.resume_config

    def short_config(env_id, preset=None, overrides=None):
        config, name = as_written(env_id, preset, overrides)
        warning = fastppo.trainer.few_updates_warning(config)
        assert warning is None, f"the README's command as written warns: {warning}"
        config.ppo.total_timesteps = min(config.ppo.total_timesteps, UPDATES * config.batch_size)
        return config, name

    def short_resume(run_dir, overrides=None, env_id=None):
        config, checkpoint = resumed(run_dir, overrides, env_id)
        config.ppo.total_timesteps = min(config.ppo.total_timesteps, checkpoint.global_step + UPDATES * config.batch_size)
        return config, checkpoint

    with monkeypatch.context() as patch:
        patch.setattr(fastppo.api, "resolved_config", short_config)
        patch.setattr(fastppo.train_cli, "resolved_config", short_config)
        patch.setattr(fastppo.training.resume, "resume_config", short_resume)
        yield


def short_steps(argv: list[str]) -> list[str]:
    """``--steps N`` of the language-model commands, at most ``UPDATES``."""
    return [str(min(int(value), UPDATES)) if i and argv[i - 1] == "--steps" else value for i, value in enumerate(argv)]


def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh folder, the current one, with the README's own code beside it (importable, as a
    user's own modules in the folder they train from) and ``examples/`` as in the repository."""
    work = tmp_path / "work"
    for name, text in FIXTURES.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    (work / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return work


def run_command(text: str, kind: str, line: int = 1) -> tuple[int, str]:
    """Run one README command (starting at README.md's ``line``) here; its exit code and what it printed on stderr."""
    stderr = io.StringIO()
    if kind == "python":  # a traceback names README.md's own lines
        with contextlib.redirect_stderr(stderr), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # too few updates: the budget cut short here, checked as written
            exec(compile("\n" * (line - 1) + text, str(README), "exec"), {"__name__": "__readme__"})
        return 0, stderr.getvalue()
    argv = shlex.split(text, comments=True)
    if argv[0] != "fastppo":  # echo, python examples/...: as the shell runs them
        result = subprocess.run(["bash", "-c", text], capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        return result.returncode, result.stderr
    with contextlib.redirect_stderr(stderr):
        try:
            code = main(short_steps(argv[1:]))
        except SystemExit as exc:  # --help
            code = exc.code or 0
    return code, stderr.getvalue()


def run_readme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, include_slow: bool) -> None:
    commands = readme_commands(README.read_text())
    workspace(tmp_path, monkeypatch)
    gpu = torch.cuda.is_available()
    ran = 0
    with short_budget(monkeypatch):
        for command in commands:
            if rule_for(command, SKIPPED) or (not include_slow and rule_for(command, SLOW)):
                continue
            text = command.text
            for pattern, replacement in ON_CPU if not gpu else ():
                text = re.sub(pattern, replacement, text)
            code, stderr = run_command(text, command.kind, command.line)
            where = f"README.md line {command.line}: {command.text.splitlines()[0]}"
            errors = [line for line in (command.shown or []) if line.startswith("fastppo: error:")]
            if errors:  # the README shows this command failing: the same line, exit 2
                assert code == 2 and stderr.strip().splitlines() == errors, f"{where}\n{stderr}"
            else:
                assert code == 0, f"{where}: exit {code}\n{stderr[-3000:]}"
            ran += 1
    assert ran >= 30, f"only {ran} README commands ran"


def test_the_readme_is_read_whole():
    """The reader sees every command: those of the sections this test relies on, and no fence it
    cannot parse (a ```bash line continued past its block); every skip rule still skips something."""
    commands = readme_commands(README.read_text())
    texts = [c.text.split("  #")[0].strip() for c in commands]
    assert "fastppo train CartPole-v1 --run-dir runs/cartpole" in texts
    assert sum(c.kind == "python" for c in commands) >= 3
    assert any(c.shown and c.shown[0].startswith("fastppo: error:") for c in commands)
    continued = [c for c in commands if c.kind == "shell" and c.text.rstrip().endswith("\\")]
    assert not continued, continued
    skipped = {reason for c in commands if (reason := rule_for(c, SKIPPED))}
    assert skipped == {reason for _, reason in SKIPPED}, "a skip rule that matches no README command: remove it"


def test_every_readme_command_runs(tmp_path, monkeypatch):
    run_readme(tmp_path, monkeypatch, include_slow=False)


@pytest.mark.slow
def test_every_readme_command_runs_including_the_slow_ones(tmp_path, monkeypatch):
    run_readme(tmp_path, monkeypatch, include_slow=True)


def test_the_short_budget_fails_a_command_whose_budget_is_too_small_to_learn(tmp_path, monkeypatch):
    """The guard the README test relies on: the 3-update command issue 34 found fails here."""
    workspace(tmp_path, monkeypatch)
    with short_budget(monkeypatch), pytest.raises(AssertionError, match="gives only 3 updates of 32768 steps"):
        run_command("fastppo train CartPole-v1 --backend tensor --num-envs 1024 --run-dir r", "shell")
    assert not Path("r").exists()
