"""Every command of the README and of the documentation pages runs as a new user would type it,
page by page in the order a reader meets them (the README, then ``docs/`` in mkdocs.yml's nav
order), each page in a fresh folder, in its own order, on a short budget (``short_budget``: each
training cut to one update once its config is built and checked as written, so a budget smaller
than one batch still fails, and one that as written gives too few updates to learn fails here too).

The blocks are read generically: every ```bash line (``\\`` continuations joined), every ``$ ``
line of a plain ``` block (its output shown below it: an error line must be the one printed), and
every ```python block; a ```python title="name.py" block is a file the reader saves, written to
that name before the page's next command. A ``fastppo`` line runs in this process through the
CLI's ``main`` with the arguments the shell would give it (a process each would spend most of the
test importing torch); any other line runs in bash. A command is skipped only by a rule of
``SKIPPED``, which says why; on a machine without a GPU, ``--device cuda`` runs on the CPU
instead (``ON_CPU``) and a command only a GPU can run is skipped (``NEEDS_GPU``)."""

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
import yaml

import fastppo.cli.train
import fastppo.envs.env_config
import fastppo.training.resume
import fastppo.training.trainer
from fastppo.cli.main import main
from tests.support.paths import ROOT

README = ROOT / "README.md"


def pages() -> list[Path]:
    """The README, then every docs page in mkdocs.yml's nav order (the generated CLI reference has no file)."""

    def walk(nav) -> Iterator[str]:
        for entry in nav:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            yield from walk(value) if isinstance(value, list) else [value]

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    return [README] + [ROOT / "docs" / name for name in walk(nav) if (ROOT / "docs" / name).exists()]


SKIPPED = (
    (r"^make ", "builds a fresh .venv and installs packages from the network; the test suite is what `make test` runs"),
    (r"^pip install", "installs packages from the network"),
    (r"^tensorboard ", "starts a server that runs until stopped"),
    (
        r"^torchrun ",
        "several processes under torchrun: tests/training/test_distributed.py and tests/rlhf/test_distributed.py "
        "run them",
    ),
    (r"^fastppo sweep ", "dozens of trials (minutes): tests/experiments/test_sweep.py runs the command"),
    (r"runs/sweep_", "reads the output of the sweep skipped above"),
    (
        r"\./my-llm|\./big-llm|\./my-r|\bmy-rm\b|prompts\.(jsonl|parquet)|pairs\.jsonl|HuggingFaceH4/",
        "your own language model, reward model or data (or the hub's): tests/rlhf runs these commands on a tiny model",
    ),
    (r"MyPOMDP-v0", "an env id your own package registers"),
)
"""(pattern, reason): the commands this test does not run, and why."""

SLOW = (
    (r"^fastppo rlhf --model runs/tiny-gpt2", "trains a GPT-2 (minutes on 2 cores even for 2 steps)"),
    (r"--search \d+", "hundreds of simulations a move: minutes for a page's games (tests/games/test_search.py)"),
)
"""Run only with ``-m slow`` (``test_every_command_runs_including_the_slow_ones``)."""

ON_CPU = ((r"--device cuda", "--device cpu"), (r'device="cuda"', 'device="cpu"'))
"""Without a GPU, these run on the CPU: the rest of the command (sizes, budget, env) is still checked."""

NEEDS_GPU = ((r"--cudagraphs", "CUDA graphs need a GPU: tests/training/test_cuda_graphs.py runs them on one"),)
"""Skipped without a GPU, where ``ON_CPU`` cannot stand in."""


@dataclass
class Command:
    kind: str  # "shell": a ```bash line or a `$ ` line; "python": a ```python block; "file": a titled one
    text: str
    line: int  # where it starts in its page
    shown: list[str] | None = None  # a `$ ` line's output as the page shows it
    name: str | None = None  # a "file" block's title: the file the reader saves it as


def page_commands(text: str) -> list[Command]:
    """A page's commands in order (see the module's docstring)."""
    commands = []
    for match in re.finditer(r"^```(\w*)([^\n]*)\n(.*?)^```$", text, re.S | re.M):
        language, body, first = match[1], match[3], text.count("\n", 0, match.start(3)) + 1
        title = re.search(r'title="([^"]+)"', match[2])
        if language == "python" and title:
            commands.append(Command("file", body, first, name=title[1]))
        elif language == "python":
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
                    shown = list(itertools.takewhile(lambda later: not later.startswith("$ "), lines[i + 1 :]))
                    commands.append(Command("shell", line[2:], first + i, shown))
    return commands


def rule_for(command: Command, rules) -> str | None:
    if command.kind == "file":
        return None
    first = command.text.splitlines()[0] if command.kind == "shell" else command.text
    return next((reason for pattern, reason in rules if re.search(pattern, first, re.M)), None)


def saved_file(page: str, name: str) -> str:
    """The ```python title="name" block of a page: a file the page shows the reader how to write."""
    return next(c.text for c in page_commands((ROOT / page).read_text()) if c.name == name)


FIXTURES = {
    # What other pages call your own code: the gymnasium.Env the your-own-env page writes, as a
    # file and in a package, for pages read without it.
    "my_envs.py": saved_file("docs/getting-started/your-own-env.md", "my_envs.py"),
    "mypackage/__init__.py": "",
    "mypackage/envs.py": "from my_envs import GridWorld\n",
}


UPDATES = 1
"""Updates each training of the pages gets here (a resume: this many more at most)."""


@contextlib.contextmanager
def short_budget(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every run cut to ``UPDATES`` updates once its config is built and checked as written (a
    budget under one batch still fails as it would for a user), and failed where the budget as
    written gives too few updates to learn (``few_updates_warning``); a resume trains ``UPDATES``
    more at most; ``fastppo rlhf``/``dpo``/``reward-model`` take ``--steps`` up to ``UPDATES``."""
    as_written, resumed = fastppo.envs.env_config.resolved_config, fastppo.training.resume.resume_config

    def short_config(env_id, preset=None, overrides=None):
        config, name = as_written(env_id, preset, overrides)
        warning = fastppo.training.trainer.few_updates_warning(config)
        assert warning is None, f"the page's command as written warns: {warning}"
        config.ppo.total_timesteps = min(config.ppo.total_timesteps, UPDATES * config.batch_size)
        return config, name

    def short_resume(run_dir, overrides=None, env_id=None):
        config, checkpoint = resumed(run_dir, overrides, env_id)
        config.ppo.total_timesteps = min(
            config.ppo.total_timesteps, checkpoint.global_step + UPDATES * config.batch_size
        )
        return config, checkpoint

    with monkeypatch.context() as patch:
        patch.setattr(fastppo.envs.env_config, "resolved_config", short_config)
        patch.setattr(fastppo.cli.train, "resolved_config", short_config)
        patch.setattr(fastppo.training.resume, "resume_config", short_resume)
        yield


REPS = 100
"""Bootstrap resamples each ``fastppo report`` of the pages takes here (2000 by default, 10 000 on
a page: most of the suite's time on the pages, for confidence intervals no test reads)."""

GAMES = 10
"""Games each ``fastppo eval --games N`` of the pages plays here at most (20 against MCTS took 8 s)."""


def short_steps(argv: list[str]) -> list[str]:
    """``--steps N`` of the language-model commands, at most ``UPDATES``; ``fastppo report``'s
    ``--reps``, as written or its default, at most ``REPS``; ``--games N`` at most ``GAMES``."""
    if argv[0] == "report" and "--reps" not in argv:
        argv = [*argv, "--reps", str(REPS)]
    capped = {"--steps": UPDATES, "--reps": REPS, "--games": GAMES}
    return [
        str(min(int(value), capped[argv[i - 1]])) if i and argv[i - 1] in capped else value
        for i, value in enumerate(argv)
    ]


def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh folder, the current one, with the pages' own code beside it (importable, as a
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


def run_command(text: str, kind: str, line: int = 1, page: Path = README) -> tuple[int, str]:
    """Run one command (starting at ``page``'s ``line``) here; its exit code and what it printed on stderr."""
    stderr = io.StringIO()
    if kind == "python":  # a traceback names the page's own lines
        with contextlib.redirect_stderr(stderr), warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", UserWarning
            )  # too few updates: the budget cut short here, checked as written
            exec(compile("\n" * (line - 1) + text, str(page), "exec"), {"__name__": "__readme__"})
        return 0, stderr.getvalue()
    argv = shlex.split(text, comments=True)
    if argv[0] != "fastppo":  # echo, python examples/...: as the shell runs them
        result = subprocess.run(
            ["bash", "-c", text],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        return result.returncode, result.stderr
    with contextlib.redirect_stderr(stderr):
        try:
            code = main(short_steps(argv[1:]))
        except SystemExit as exc:  # --help
            code = exc.code or 0
    return code, stderr.getvalue()


def run_page(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, include_slow: bool) -> int:
    """Run the page's commands in order in a fresh folder; how many ran."""
    commands = page_commands(page.read_text())
    workspace(tmp_path, monkeypatch)
    gpu = torch.cuda.is_available()
    ran = 0
    with short_budget(monkeypatch):
        for command in commands:
            if command.kind == "file":  # the reader saves it
                Path(command.name).write_text(command.text)
                continue
            if (
                rule_for(command, SKIPPED)
                or (not include_slow and rule_for(command, SLOW))
                or (not gpu and rule_for(command, NEEDS_GPU))
            ):
                continue
            text = command.text
            for pattern, replacement in ON_CPU if not gpu else ():
                text = re.sub(pattern, replacement, text)
            code, stderr = run_command(text, command.kind, command.line, page)
            where = f"{page.relative_to(ROOT)} line {command.line}: {command.text.splitlines()[0]}"
            errors = [line for line in (command.shown or []) if line.startswith("fastppo: error:")]
            if errors:  # the page shows this command failing: the same line, exit 2
                assert code == 2 and stderr.strip().splitlines() == errors, f"{where}\n{stderr}"
            else:
                assert code == 0, f"{where}: exit {code}\n{stderr[-3000:]}"
            ran += 1
    return ran


PAGES = [
    page
    for page in pages()
    if any(c.kind != "file" and not rule_for(c, SKIPPED) for c in page_commands(page.read_text()))
]
"""The pages with a command to run, in reading order: one test each, its id the page's path."""


def test_the_pages_are_read_whole():
    """The reader sees every command: those of the sections this test relies on, and no fence it
    cannot parse (a ```bash line continued past its block); every skip rule still skips something."""
    commands = [c for page in pages() for c in page_commands(page.read_text())]
    texts = [c.text.split("  #")[0].strip() for c in commands]
    assert "fastppo train CartPole-v1 --run-dir runs/cartpole" in texts
    assert "fastppo train my_envs.py:GridWorld --total-timesteps 20000 --run-dir runs/grid" in texts
    assert sum(c.kind == "python" for c in commands) >= 10
    assert any(c.kind == "file" for c in commands)
    assert any(c.shown and c.shown[0].startswith("fastppo: error:") for c in commands)
    continued = [c for c in commands if c.kind == "shell" and c.text.rstrip().endswith("\\")]
    assert not continued, continued
    for rules in (SKIPPED, SLOW, NEEDS_GPU):
        matched = {reason for c in commands if (reason := rule_for(c, rules))}
        assert matched == {reason for _, reason in rules}, "a rule that matches no command of the pages: remove it"
    assert PAGES[0] == README and len(PAGES) >= 15


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_command_runs(page, tmp_path, monkeypatch):
    assert run_page(page, tmp_path, monkeypatch, include_slow=False) > 0


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if any(rule_for(c, SLOW) for c in page_commands(p.read_text()))])
def test_every_command_runs_including_the_slow_ones(page, tmp_path, monkeypatch):
    assert run_page(page, tmp_path, monkeypatch, include_slow=True) > 0


def test_the_short_budget_fails_a_command_whose_budget_is_too_small_to_learn(tmp_path, monkeypatch):
    """The guard the README test relies on: the 3-update command issue 34 found fails here."""
    workspace(tmp_path, monkeypatch)
    with short_budget(monkeypatch), pytest.raises(AssertionError, match="gives only 3 updates of 32768 steps"):
        run_command("fastppo train CartPole-v1 --backend tensor --num-envs 1024 --run-dir r", "shell")
    assert not Path("r").exists()
