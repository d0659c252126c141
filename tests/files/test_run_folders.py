"""No silent overwrite: a new run (``fastppo train``, ``--seeds``, ``fastppo.train``,
``fastppo.train_seeds``) refuses a folder that holds a run's files, before it writes a byte there;
an empty folder or one of unrelated files is trained into; default folders never collide."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import fastppo
from fastppo.cli.main import main
from fastppo.envs.env_config import make_config
from fastppo.errors import FastPPOError
from fastppo.files.run_folder import default_run_dir, write_config

TINY = ["--num-envs", "2", "--num-steps", "64", "--total-timesteps", "256", "--no-tensorboard", "--no-progress"]
API_TINY = {"num_envs": 2, "num_steps": 64, "total_timesteps": 256, "tensorboard": False, "progress": False}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished run, with TensorBoard's events: copied, never trained into."""
    run = tmp_path_factory.mktemp("finished") / "run"
    assert main(["train", "CartPole-v1", *TINY, "--tensorboard", "true", "--run-dir", str(run)]) == 0
    return run


def contents(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def refused(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def holding(finished: Path, folder: Path, *names: str) -> Path:
    """``folder`` with a copy of ``names`` from the finished run."""
    folder.mkdir(parents=True)
    for name in names:
        source = next(finished.glob(name))
        (shutil.copytree if source.is_dir() else shutil.copy)(source, folder / source.name)
    return folder


@pytest.mark.parametrize(
    "names, shown",
    [
        (["metrics.jsonl"], "metrics.jsonl"),
        (["agent.json"], "agent.json"),
        (["config.yaml"], "config.yaml"),
        (["events.out.tfevents.*"], "events.out.tfevents."),
        (["checkpoints"], "checkpoints"),
        (
            ["config.yaml", "metrics.jsonl", "agent.json", "policy.safetensors", "events.out.tfevents.*"],
            "config.yaml, metrics.jsonl, agent.json, ...",
        ),  # checkpoints deleted
    ],
)
def test_train_refuses_a_folder_holding_a_runs_files_and_leaves_it_as_it_was(finished, tmp_path, capsys, names, shown):
    run = holding(finished, tmp_path / "run", *names)
    before = contents(run)
    err = refused(["train", "CartPole-v1", *TINY, "--run-dir", str(run)], capsys)
    assert err.startswith(f"fastppo: error: {run} already holds a run ({shown}")
    assert err.endswith(f"): continue it with 'fastppo train --resume {run}' or pick another --run-dir")
    assert contents(run) == before


def test_train_refuses_a_seeds_folder_and_a_folder_of_runs(finished, tmp_path, capsys):
    seeds = tmp_path / "seeds"
    holding(finished, seeds / "seed_3", "metrics.jsonl", "agent.json")
    err = refused(["train", "CartPole-v1", *TINY, "--run-dir", str(seeds)], capsys)
    assert err == (
        f"fastppo: error: {seeds} already holds a run (seed_3/): continue it with 'fastppo train --resume "
        f"{seeds}' or pick another --run-dir"
    )
    runs = tmp_path / "runs"
    holding(finished, runs / "CartPole-v1__ppo__1__1", "metrics.jsonl")
    before = contents(runs)
    err = refused(["train", "CartPole-v1", *TINY, "--run-dir", str(runs)], capsys)
    assert err == (
        f"fastppo: error: {runs} holds runs (CartPole-v1__ppo__1__1/): pick another --run-dir, a folder of "
        "its own for the new run"
    )
    assert contents(runs) == before


def test_an_empty_folder_or_one_of_unrelated_files_is_trained_into(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    (other / "videos").mkdir()
    for folder in (empty, other):
        assert main(["train", "CartPole-v1", *TINY, "--run-dir", str(folder)]) == 0
        assert (folder / "metrics.jsonl").is_file()
    assert (other / "notes.txt").read_text() == "mine\n"


def test_seeds_refuse_a_single_runs_folder_and_an_earlier_seeds_job(finished, tmp_path, capsys):
    single = tmp_path / "single"
    shutil.copytree(finished, single)
    before = contents(single)
    err = refused(["train", "CartPole-v1", *TINY, "--seeds", "1-2", "--run-dir", str(single)], capsys)
    assert err.startswith(f"fastppo: error: {single} already holds a run (config.yaml, metrics.jsonl, agent.json, ...)")
    assert contents(single) == before
    earlier = tmp_path / "earlier"
    holding(finished, earlier / "seed_1", "metrics.jsonl")
    err = refused(["train", "CartPole-v1", *TINY, "--seeds", "2-3", "--run-dir", str(earlier)], capsys)
    assert err.startswith(f"fastppo: error: {earlier} already holds a run (seed_1/)")
    assert sorted(p.name for p in earlier.iterdir()) == ["seed_1"]


def test_the_python_api_follows_the_same_rule(finished, tmp_path):
    run = holding(finished, tmp_path / "run", "metrics.jsonl")
    before = contents(run)
    with pytest.raises(FastPPOError, match="already holds a run"):
        fastppo.train("CartPole-v1", run_dir=run, **API_TINY)
    with pytest.raises(FastPPOError, match="already holds a run"):
        fastppo.train_seeds("CartPole-v1", [1, 2], run_dir=run, **API_TINY)
    assert contents(run) == before


def test_default_run_dirs_of_one_second_do_not_collide(tmp_path, monkeypatch):
    monkeypatch.setattr("time.time", lambda: 1700000000.5)
    config = make_config("CartPole-v1", overrides={"run_root": str(tmp_path)})
    first = default_run_dir(config)
    assert first == tmp_path / "CartPole-v1__ppo__1__1700000000"
    first.mkdir()
    assert default_run_dir(config) == tmp_path / "CartPole-v1__ppo__1__1700000000-2"
    (tmp_path / "CartPole-v1__ppo__1__1700000000-2").mkdir()
    assert default_run_dir(config) == tmp_path / "CartPole-v1__ppo__1__1700000000-3"


def test_default_run_dirs_are_named_in_characters_a_shell_takes_unquoted(tmp_path, monkeypatch):
    monkeypatch.setattr("time.time", lambda: 1700000000.5)
    for env_id, name in [
        ("ALE/Pong-v5", "ALE_Pong-v5"),
        ("pz:mpe2.simple_spread_v3", "pz_mpe2.simple_spread_v3"),
        (
            "openspiel:turn_based_simultaneous_game(game=goofspiel(num_cards=3))",
            "openspiel_turn_based_simultaneous_game_game_goofspiel_num_cards_3",
        ),
    ]:
        config = make_config("CartPole-v1", overrides={"run_root": str(tmp_path)})
        config.env.env_id = env_id
        assert default_run_dir(config) == tmp_path / f"{name}__ppo__1__1700000000"


def test_resume_starts_over_a_run_that_stopped_before_its_first_checkpoint(tmp_path, capsys):
    """A run that fails before its first checkpoint (here its on_iteration hook raises at its second
    iteration; in the wild, a game of the user's that breaks) leaves config.yaml, metrics.jsonl and
    TensorBoard events, and no checkpoint: a new run there is still refused (its files are someone's
    data), and --resume, which the refusal names, starts it over with its saved config: the same
    run as one that never failed, its metrics and curves cut back to the new run's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fastppo.files.run_folder import own_run_files
    from fastppo.training.trainer import train
    from tests.support.resume import metrics

    settings = {**API_TINY, "total_timesteps": 512, "tensorboard": True, "seed": 3}
    run = tmp_path / "run"

    def broken_env(step: int, _: dict) -> None:
        if step == 256:
            raise RuntimeError("the env broke")

    with pytest.raises(RuntimeError, match="the env broke"):
        train(make_config("CartPole-v1", overrides=settings), run, on_iteration=broken_env)
    assert (
        own_run_files(run)[:2] == ["config.yaml", "metrics.jsonl"]
        and len(own_run_files(run)) == 3
        and len(metrics(run)) == 2
    )
    err = refused(["train", "CartPole-v1", *TINY, "--run-dir", str(run)], capsys)
    assert err.startswith(
        f"fastppo: error: {run} already holds a run (config.yaml, metrics.jsonl, events.out.tfevents."
    )
    assert main(["train", "--resume", str(run)]) == 0
    assert (
        f"fastppo: {run} stopped before its first checkpoint: starting it over with its saved config"
        in capsys.readouterr().out
    )
    once = fastppo.train("CartPole-v1", run_dir=tmp_path / "once", **settings)
    assert metrics(run) == metrics(tmp_path / "once") and len(once.history) == 4
    curves = EventAccumulator(str(run))
    curves.Reload()
    assert [event.step for event in curves.Scalars("charts/SPS")] == [
        128,
        256,
        384,
        512,
    ]  # the failed run's curves dropped, not drawn twice


@pytest.mark.parametrize(
    "text, reason",
    [
        ("env: {env_id: CartPole-v1}\n", "the config lacks"),
        (None, "config.yaml is cut short"),  # a whole config written with its markers, the end marker lost
    ],
)
def test_resume_refuses_a_damaged_config_of_a_run_that_stopped_before_its_first_checkpoint(
    tmp_path, capsys, text, reason
):
    run = tmp_path / "run"
    run.mkdir()
    if text is None:  # what is left still parses into a whole config
        write_config(run, make_config("CartPole-v1"))
        text = (run / "config.yaml").read_text().removesuffix("...\n")
    (run / "config.yaml").write_text(text)
    (run / "metrics.jsonl").write_text("")
    before = contents(run)
    err = refused(["train", "--resume", str(run)], capsys)
    assert err.startswith(
        f"fastppo: error: {run} stopped before its first checkpoint, and its config.yaml cannot start it "
        f"over: damaged ({reason}"
    ), err
    assert contents(run) == before
