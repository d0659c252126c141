"""The README is a first page that stays true to the repository, and the documentation's CLI
reference is built from the code: every hyperparameter in it (tests/docs/test_docs_site.py builds and
renders the whole site)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import tomllib

from fastppo.config import Config, sections
from tests.support.paths import ROOT

README = (ROOT / "README.md").read_text()


def cli_reference() -> str:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks.cli_reference()


def test_the_readme_is_a_first_page():
    assert len(README.splitlines()) <= 250, "the README is the first page: move details to docs/"
    assert "make train" in README and "make test" in README


def test_the_readmes_links_lead_somewhere():
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", README) if "://" not in t]
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert targets and not missing, missing


def test_every_hyperparameter_is_in_the_generated_cli_reference():
    """Generated from the parsers, so this holds by construction unless the generator drops flags."""
    page = cli_reference()
    flags = [
        f"--{name.replace('_', '-')}.{f.name.replace('_', '-')}"
        for name, section in sections(Config()).items()
        for f in dataclasses.fields(section)
    ]
    missing = [flag for flag in flags if flag != "--env.env-id" and f"`{flag}`" not in page]
    assert not missing, missing
    assert "## fastppo rlhf" in page and "`--estimator`" in page and "`ENV_ID`" in page


def page(name: str) -> str:
    return (ROOT / name).read_text()


def test_the_install_steps_give_python_the_clone_and_the_licence():
    pyproject = tomllib.loads(page("pyproject.toml"))["project"]
    assert pyproject["requires-python"] == ">=3.11" and pyproject["license"] == {"text": "MIT"}
    for name in ("README.md", "docs/getting-started/first-agent.md"):
        assert "Python ≥ 3.11" in page(name) and "Clone the repository, then" in page(name), name
        assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in page(name), name
    licence = page("LICENSE")
    assert licence.startswith("MIT License") and "Copyright (c) 2026 fastppo developers" in licence


def test_every_extra_is_listed():
    extras = tomllib.loads(page("pyproject.toml"))["project"]["optional-dependencies"]
    for name in ("README.md", "docs/getting-started/first-agent.md"):
        listed = set(re.findall(r"`\[(\w+)\]`", page(name)))
        assert set(extras) <= listed, (name, sorted(set(extras) - listed))


def test_the_presets_table_lists_every_preset():
    table = [line for line in page("docs/guides/presets.md").splitlines() if line.startswith("| `")]
    listed = {name for line in table for name in re.findall(r"`([^`]+)`", line.split("|")[1])}
    presets = {path.stem for path in (ROOT / "src" / "fastppo" / "presets").glob("*.yaml")}
    assert presets <= listed, sorted(presets - listed)


def test_the_first_commands_time_is_the_measured_one():
    """The pages that quote how long `fastppo train CartPole-v1` takes quote the benchmarks page's
    measurement, and none another figure."""
    measured = re.search(
        r"### The first command, from the shell\n\n.*?real (\d+)\.\d+-(\d+)\.\d+ s",
        page("docs/benchmarks/index.md"),
        re.S,
    )
    assert measured
    figure = f"{measured.group(1)}-{int(measured.group(2)) + 1} s"
    quoting = [
        "README.md",
        "docs/index.md",
        "docs/getting-started/first-agent.md",
        "docs/getting-started/evaluate-record-export.md",
        "docs/guides/presets.md",
    ]
    for name in quoting:
        text = " ".join(page(name).split())
        assert figure in text, name
        assert not re.search(rf"(?<![\d.])(?!{figure})\d+-\d+ s (on 2|from the shell)", text), name


def test_the_benchmarks_pages_date_each_measurement():
    """A measurement is dated and placed on its machine, not 'this session' (gpu_session.sh is a file)."""
    for name in ("docs/benchmarks/index.md", "docs/benchmarks/history.md", "docs/guides/speed.md"):
        assert not re.findall(r"\bsessions?\b", page(name).replace("gpu_session.sh", "")), name


SB3_DEFAULTS = {
    "num_steps": 2048,
    "minibatch": 64,
    "update_epochs": 10,
    "learning_rate": 3e-4,
    "lr_schedule": "constant",
    "ent_coef": 0.0,
    "clip_vloss": False,
}
"""stable_baselines3.PPO's defaults (n_steps, batch_size, n_epochs, learning_rate constant, ent_coef, no
clip_range_vf)."""
CLEANRL_IN_SB3 = {
    "num_steps": 128,
    "minibatch": 128,
    "update_epochs": 4,
    "learning_rate": 2.5e-4,
    "lr_schedule": "constant",
    "ent_coef": 0.01,
    "clip_vloss": False,
}
"""What benchmarks/sb3_compare.py gives SB3 in the CartPole SPS comparison: CleanRL's ppo.py settings."""


def test_coming_from_sb3_gives_each_setting_its_true_name():
    from fastppo.cli.main import build_parser
    from fastppo.envs.env_config import resolved_config

    def settings(command: str) -> dict:
        args = build_parser().parse_args(command.split()[1:])
        config, _ = resolved_config(
            args.env_id, args.preset, {k.removeprefix("hp:"): v for k, v in vars(args).items() if k.startswith("hp:")}
        )
        ppo = config.ppo
        return {
            "num_steps": ppo.num_steps,
            "minibatch": config.batch_size // ppo.num_minibatches,
            "update_epochs": ppo.update_epochs,
            "learning_rate": ppo.learning_rate,
            "lr_schedule": ppo.lr_schedule,
            "ent_coef": ppo.ent_coef,
            "clip_vloss": ppo.clip_vloss,
        }

    text = page("docs/coming-from.md")
    comparison, defaults = (
        re.search(rf"{lead}.*?```bash\n(fastppo train [^\n]+)\n```", text, re.S).group(1)
        for lead in ("The CartPole SPS comparison", "SB3's own defaults")
    )
    assert settings(comparison) == CLEANRL_IN_SB3
    assert settings(defaults) == SB3_DEFAULTS


def test_the_cartpole_figure_is_made_by_its_pages_commands():
    """`make cartpole-figure` writes docs/cartpole.png with the commands the page shows beside it."""
    recipe = page("Makefile").split("\ncartpole-figure:")[1].split("\n\n")[0]
    commands = [
        line.split("; \\")[0].strip().replace("$(FASTPPO)", "fastppo")
        for line in recipe.splitlines()
        if "$(FASTPPO)" in line
    ]
    shown = [line.split("#")[0].strip() for line in page("docs/getting-started/evaluate-record-export.md").splitlines()]
    assert len(commands) == 3 and all(command in shown for command in commands), commands
    assert "cp cartpole.png $(CURDIR)/docs/cartpole.png" in recipe
