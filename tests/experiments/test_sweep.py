"""fastppo sweep: an Optuna study shared by worker processes, resumable after a kill, whose best
trial becomes a preset that trains; the search space and its YAML override; the trainer's hook."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

import fastppo
import fastppo.experiments.sweep
import fastppo.training.trainer
from fastppo.cli.main import main
from fastppo.config import available_cpus
from fastppo.envs.env_config import make_config
from fastppo.experiments.report import collect
from fastppo.experiments.sweep import PRUNED_BECAUSE, PruningReport, open_storage
from fastppo.experiments.sweep_space import DEFAULT_SPACE, load_space
from tests.support.paths import ROOT

TINY = ["--num-envs", "2", "--num-steps", "64", "--total-timesteps", "512", "--no-tensorboard"]
CONSOLE = [sys.executable, "-m", "fastppo"]
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def study_trials(run_dir: Path) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="CartPole-v1", storage=f"sqlite:///{run_dir.resolve()}/sweep.db").trials


def run_sweep(command: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """``command`` (a sweep) to its end; past ``timeout``, its workers are killed with it (a plain
    ``subprocess.run`` kills only the command and leaves them running after the test)."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def ask_ten(url: str, out: multiprocessing.Queue) -> None:
    """A worker process: the numbers of the next 10 trials it is handed."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.load_study(study_name="queue", storage=open_storage(url, 2))
    out.put([study.ask().number for _ in range(10)])


def test_workers_sharing_sqlite_are_each_handed_a_different_queued_trial(tmp_path):
    """40 queued trials (as killed trials' retries are), 4 processes asking for 10 each at once:
    40 different trials, all of the queued ones. On SQLite, which ignores SELECT ... FOR UPDATE,
    optuna's own sessions handed the same trial to two workers (3 runs of 3 had duplicates)."""
    url = f"sqlite:///{tmp_path}/sweep.db"
    study = optuna.create_study(study_name="queue", storage=open_storage(url, 2))
    for x in range(40):
        study.enqueue_trial({"x": float(x)})
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers = [context.Process(target=ask_ten, args=(url, out)) for _ in range(4)]
    for worker in workers:
        worker.start()
    handed = [number for _ in workers for number in out.get(timeout=120)]
    for worker in workers:
        worker.join()
    assert sorted(handed) == list(range(40))


def test_four_trials_on_two_workers_write_a_preset_that_trains(tmp_path, capfd):
    sweep = tmp_path / "sweep"
    command = ["sweep", "CartPole-v1", "--workers", "2", "--seeds", "1-2", *TINY, "--run-dir", str(sweep)]
    assert main([*command, "--trials", "4"]) == 0
    out = capfd.readouterr().out
    # The median pruner waits for 5 complete trials. (A trial two workers start for the last slot at
    # once fails at its start: not counted.)
    every = study_trials(sweep)
    trials = [t for t in every if t.state != TrialState.FAIL or t.params]
    assert len(trials) == 4 and all(t.state == TrialState.COMPLETE for t in trials)
    assert (
        all(f"fastppo: trial {t.number}: {t.value:.1f}" in out for t in trials)
        and "| trial | score | learning_rate |" in out
    )
    for trial in trials:  # the value is the mean of fastppo report's final scores of the trial's seeds
        (stats,) = collect([sweep / f"trial_{trial.number}"], reps=10)
        assert stats.seeds == [1, 2] and stats.estimates["mean"].point == pytest.approx(trial.value)
    best = max(trials, key=lambda t: t.value)
    preset = yaml.safe_load((sweep / "best.yaml").read_text())
    assert f"trial {best.number} scored {best.value:.1f}" in preset["description"]
    assert preset["ppo"]["learning_rate"] == best.params["ppo.learning_rate"] and preset["env"]["num_envs"] == 2

    trained = tmp_path / "trained"
    assert (
        main(
            [
                "train",
                "CartPole-v1",
                "--preset",
                str(sweep / "best.yaml"),
                "--run-dir",
                str(trained),
                "--no-progress",
                "--no-tensorboard",
            ]
        )
        == 0
    )
    config = yaml.safe_load((trained / "config.yaml").read_text())
    assert (
        config["ppo"]["learning_rate"] == best.params["ppo.learning_rate"] and config["ppo"]["total_timesteps"] == 512
    )
    assert config["policy"]["hidden_sizes"] == [int(w) for w in best.params["policy.hidden_sizes"].split(",")]

    capfd.readouterr()
    assert main([*command, "--trials", "0"]) == 0  # the table and the preset again, no trial run
    assert "4 complete, 0 pruned" in capfd.readouterr().out and len(study_trials(sweep)) == len(every)
    assert main([*command, "--trials", "0", "--gamma", "0.9"]) == 2
    err = capfd.readouterr().err
    assert "started with other settings (ppo.gamma, space differ)" in err and len(err.strip().splitlines()) == 1


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # retried_trial_number
def test_a_killed_sweep_continues_and_retries_the_killed_trials(tmp_path):
    sweep = tmp_path / "sweep"
    # Trials of seconds (TINY's 512 steps take milliseconds: all 4 could end between two polls, 1 run in 3 did).
    longer = [*TINY, "--total-timesteps", "32768"]
    command = [
        *CONSOLE,
        "sweep",
        "CartPole-v1",
        "--trials",
        "4",
        "--workers",
        "2",
        "--seeds",
        "1",
        "--heartbeat",
        "2",
        *longer,
        "--run-dir",
        str(sweep),
    ]
    # Its own session, so that SIGKILL takes the command and its workers at once, as a crash would.
    with open(tmp_path / "first.log", "w") as log:
        process = subprocess.Popen(command, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        # The command prints its first line once it has made the study: reading sooner would race its table creation.
        states = (
            {t.state for t in study_trials(sweep)}
            if "fastppo: sweep of" in (tmp_path / "first.log").read_text()
            else set()
        )
        if {TrialState.COMPLETE, TrialState.RUNNING} <= states:
            os.killpg(process.pid, signal.SIGKILL)
            break
        time.sleep(0.1)
    process.wait()
    killed = {t.number for t in study_trials(sweep) if t.state == TrialState.RUNNING}  # left running by the kill
    assert killed, f"the sweep ended before a kill caught a trial running: {(tmp_path / 'first.log').read_text()}"

    rerun = run_sweep(command)
    assert rerun.returncode == 0, rerun.stderr
    trials = study_trials(sweep)
    story = (
        f"killed {killed}; trials {[(t.number, t.state.name, t.system_attrs) for t in trials]}; rerun: {rerun.stdout}"
    )
    assert sum(t.state in FINISHED for t in trials) == 4 and not any(t.state == TrialState.RUNNING for t in trials), (
        story
    )
    assert all(t.state == TrialState.FAIL for t in trials if t.number in killed), story  # neither blocking nor counted
    assert all(
        f"fastppo: trial {n}: its worker stopped (no heartbeat); queued again" in rerun.stdout for n in killed
    ), story
    # A retry runs the killed trial's hyperparameters again, its partial runs deleted (one retry at least: a
    # killed trial is queued before its worker asks for a trial; another worker may have taken the slot meanwhile).
    retries = {RetryHeartbeatStaleTrialCallback.retried_trial_number(t): t for t in trials if t.state in FINISHED}
    retried = [n for n in killed if n in retries]
    assert retried, story
    assert all(
        retries[n].params.items() >= next(t.params for t in trials if t.number == n).items()
        and not (sweep / f"trial_{n}").exists()
        for n in retried
    )
    assert (sweep / "best.yaml").exists()


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # retried_trial_number
def test_a_trial_its_worker_left_without_a_heartbeat_is_queued_again(tmp_path):
    """A worker killed between creating its trial and recording the trial's first heartbeat leaves
    it RUNNING with no heartbeat, which optuna's stale check passes over: a CI run's continued
    sweep waited for such a trial for ever. ``study.ask()`` leaves a trial in that state."""
    sweep = tmp_path / "sweep"
    command = [
        *CONSOLE,
        "sweep",
        "CartPole-v1",
        "--workers",
        "1",
        "--seeds",
        "1",
        "--heartbeat",
        "1",
        *TINY,
        "--run-dir",
        str(sweep),
    ]
    assert run_sweep([*command, "--trials", "1"]).returncode == 0
    orphan = optuna.load_study(study_name="CartPole-v1", storage=f"sqlite:///{sweep.resolve()}/sweep.db").ask().number
    rerun = run_sweep([*command, "--trials", "2"], timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    trials = study_trials(sweep)
    assert [t.state for t in trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]
    assert f"fastppo: trial {orphan}: its worker stopped (no heartbeat); queued again" in rerun.stdout
    assert RetryHeartbeatStaleTrialCallback.retried_trial_number(trials[2]) == orphan


def test_a_space_file_replaces_the_default(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(
        "ppo:\n  learning_rate: {float: [1.0e-3, 1.0e-2], log: true}\n  update_epochs: {int: [1, 3]}\n"
        "policy:\n  hidden_sizes: {choices: [[16], [32, 32]]}\n"
    )
    sweep = tmp_path / "sweep"
    assert (
        main(
            [
                "sweep",
                "CartPole-v1",
                "--trials",
                "2",
                "--workers",
                "1",
                "--seeds",
                "1",
                "--space",
                str(space),
                *TINY,
                "--run-dir",
                str(sweep),
            ]
        )
        == 0
    )
    for trial in study_trials(sweep):
        assert set(trial.params) == {"ppo.learning_rate", "ppo.update_epochs", "policy.hidden_sizes"}
        config = yaml.safe_load((sweep / f"trial_{trial.number}" / "seed_1" / "config.yaml").read_text())
        assert config["policy"]["hidden_sizes"] in ([16], [32, 32]) and 1e-3 <= config["ppo"]["learning_rate"] <= 1e-2
        assert config["ppo"]["num_minibatches"] == 2  # an untuned field keeps the CartPole-v1 preset's value


def test_combinations_the_config_refuses_are_pruned_with_the_reason(tmp_path, capfd):
    space = tmp_path / "space.yaml"
    space.write_text("ppo:\n  num_minibatches: {choices: [3]}\n  learning_rate: {float: [1.0e-3, 1.0e-2]}\n")
    sweep = tmp_path / "sweep"
    assert (
        main(
            [
                "sweep",
                "CartPole-v1",
                "--trials",
                "2",
                "--workers",
                "1",
                "--seeds",
                "1",
                "--space",
                str(space),
                *TINY,
                "--run-dir",
                str(sweep),
            ]
        )
        == 0
    )
    trials = study_trials(sweep)
    assert len(trials) == 2 and all(t.state == TrialState.PRUNED for t in trials)
    assert all("does not split into 3 minibatches" in t.user_attrs[PRUNED_BECAUSE] for t in trials)
    assert "no trial has completed yet" in capfd.readouterr().out and not (sweep / "best.yaml").exists()


def test_the_default_space_covers_each_group():
    space = load_space(DEFAULT_SPACE)
    assert {
        "ppo.learning_rate",
        "ppo.num_steps",
        "ppo.num_minibatches",
        "policy.hidden_sizes",
        "env.normalize_obs",
    } <= set(space)
    assert space["ppo.learning_rate"].log and space["policy.hidden_sizes"].choices == ("64,64", "128,128", "256,256")
    readme = (ROOT / "docs" / "guides" / "sweeps.md").read_text()
    assert all(f"| {key.split('.')[0]} | `{key.split('.')[1]}` |" in readme for key in space), (
        "docs/guides/sweeps.md's default search space table is out of date"
    )


class FakeTrial:
    def __init__(self, prune_after: int):
        self.reports: list[tuple[int, float]] = []
        self.attrs: dict[str, str] = {}
        self.prune_after = prune_after

    def report(self, value: float, step: int) -> None:
        self.reports.append((step, value))

    def should_prune(self) -> bool:
        return len(self.reports) >= self.prune_after

    def set_user_attr(self, key: str, value: str) -> None:
        self.attrs[key] = value


def test_pruning_reports_the_score_so_far_on_a_grid_of_the_budget():
    trial = FakeTrial(prune_after=3)
    report = PruningReport(trial, total_timesteps=1000)
    report(128, {})  # no episode yet: nothing to report
    report(256, {"charts/episodic_return": 10.0})
    report(300, {"charts/episodic_return": 20.0})  # grid points every 50 steps: 256 reported as 250, 300 as 300
    report(310, {"charts/episodic_return": 30.0})  # the same grid point as 300: not reported twice
    assert trial.reports == [(250, 10.0), (300, 20.0)]
    with pytest.raises(optuna.TrialPruned, match="below the median"):
        report(400, {"charts/episodic_return": 40.0})
    assert trial.reports[-1] == (400, 40.0) and "at step 400" in trial.attrs[PRUNED_BECAUSE]


def test_an_exception_from_on_iteration_ends_the_run_with_its_envs_closed(tmp_path, monkeypatch):
    closed = []
    make = fastppo.training.trainer.make_vec_env

    def recording_make(*args, **kwargs):
        envs = make(*args, **kwargs)
        close = envs.close
        envs.close = lambda: closed.append(True) or close()
        return envs

    monkeypatch.setattr(fastppo.training.trainer, "make_vec_env", recording_make)
    steps: list[int] = []

    def stop_at_second(step: int, metrics: dict[str, float]) -> None:
        steps.append(step)
        if len(steps) == 2:
            raise optuna.TrialPruned("stop")

    config = make_config(
        "CartPole-v1",
        None,
        {"num_envs": 2, "num_steps": 64, "total_timesteps": 1024, "progress": False, "tensorboard": False},
    )
    with pytest.raises(optuna.TrialPruned):
        fastppo.training.trainer.train(config, tmp_path / "run", on_iteration=stop_at_second)
    assert steps == [128, 256] and closed == [True]
    assert (
        len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2
        and not (tmp_path / "run" / "policy.safetensors").exists()
    )


@pytest.mark.parametrize(
    ("argv", "space", "message"),
    [
        (["--trials", "-1"], None, "--trials must be >= 0"),
        (["--trials", "2", "--workers", "0"], None, "--workers must be >= 1"),
        (["--trials", "2", "--seed", "3"], None, "drop --seed"),
        (["--trials", "2", "--seeds", "2-1"], None, "runs backwards"),
        (["--trials", "2", "--sampler-seed", "-1"], None, "--sampler-seed must be in [0, 4294967295]"),
        (["--trials", "0"], None, "no sweep in sweep (no sweep.db there)"),
        (["--trials", "0", "--storage", "sqlite:///other.db"], None, "no study 'CartPole-v1' in sqlite:///other.db"),
        (["--trials", "2", "--storage", "nosuchdb://x"], None, "cannot open --storage nosuchdb://x"),
        (["--trials", "2", "--space", "missing.yaml"], None, "cannot read --space missing.yaml"),
        (["--trials", "2"], "ppo: {num_steps: {float: [16, 64]}}", "ppo.num_steps is an integer"),
        (["--trials", "2"], "ppo: {nope: {choices: [1]}}", "unknown hyperparameter 'ppo.nope'"),
        (["--trials", "2"], "policy: {activation: {choices: [gelu]}}", "must be one of tanh, relu"),
        (["--trials", "2"], "ppo: {gamma: {uniform: [0, 1]}}", "ppo.gamma: expected {float: [low, high]}"),
        (
            ["--trials", "2"],
            "ppo: {learning_rate: {float: [0, 1], log: true}}",
            "ppo.learning_rate: `low > 0` must hold for `log=True`",
        ),
        (["--trials", "2"], "run: {seed: {int: [1, 2]}}", "run.seed is not a hyperparameter a sweep tunes"),
        (["--trials", "2"], "[1, 2]", "must map sections to fields"),
        (
            ["--trials", "2"],
            b"ppo: {learning_rate: \xff}",
            "--space space.yaml is not UTF-8 text (byte 21): give a YAML search space",
        ),
        # A field spelled as its flag is that field (no KeyError from the spelling).
        (["--trials", "2"], "ppo: {num-steps: {float: [16, 64]}}", "--space space.yaml: ppo.num_steps is an integer"),
        (
            ["--trials", "2", "--learning-rate", "1e-3"],
            "ppo: {learning_rate: {float: [1.0e-4, 1.0e-2]}}",
            "nothing is left to tune",
        ),
    ],
)
def test_bad_sweep_input_is_one_line_and_exit_2(argv, space, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if space is not None:
        Path("space.yaml").write_bytes(space if isinstance(space, bytes) else space.encode())
        argv = [*argv, "--space", "space.yaml"]
    assert main(["sweep", "CartPole-v1", *argv, *TINY, "--run-dir", "sweep"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    if argv == ["--trials", "0"]:
        assert not Path("sweep").exists()  # nothing made for a sweep that is not there


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def drawn(space: dict) -> dict:
    """A value of each distribution of ``space``: its first choice, or its low end."""
    return {
        key: d.choices[0] if isinstance(d, optuna.distributions.CategoricalDistribution) else d.low
        for key, d in space.items()
    }


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # retry_history
@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        # A retry's start deletes its earlier attempts' folders trial_<n>: read unchecked, a path
        # deleted a folder outside the sweep, and other forms deleted a finished trial's runs.
        ({"retry_history": ["0/../../victim"]}, "trial 2's retry history is ['0/../../victim']"),
        ({"retry_history": [1]}, "trial 2's retry history is [1], not earlier failed trials' numbers"),
        ({"retry_history": ["0"]}, "trial 2's retry history is ['0']"),
        ({"retry_history": [True]}, "trial 2's retry history is [True]"),
        ({"retry_history": "0"}, "trial 2's retry history is '0'"),
        (
            {"fixed_params": {"ppo.learning_rate": 5.0}},
            "trial 2's hyperparameters are not drawn from the sweep's space",
        ),
        (
            {"fixed_params": {"ppo.update_epochs": "4"}},
            "trial 2's hyperparameters are not drawn from the sweep's space",
        ),
        ("settings", "its stored settings are 'x', not fastppo sweep's"),
        ("seed scores", "trial 1's scores per seed are ['x'], not 1 numbers"),
        ("best out of space", "trial 2's hyperparameters are not drawn from the sweep's space"),
    ],
)
def test_a_crafted_sweep_database_is_one_line_and_deletes_nothing(damage, problem, tmp_path, capfd, monkeypatch):
    """Everything a continued sweep reads from its database is data of checked types: a damaged or
    crafted sweep.db is one line and exit 2, before any trial runs or any folder is deleted."""
    sweep, victim = tmp_path / "sweep", tmp_path / "victim"
    command = ["sweep", "CartPole-v1", "--workers", "1", "--seeds", "1", *TINY, "--run-dir", str(sweep)]
    with monkeypatch.context() as patched:  # the study with its settings, no trial run
        patched.setattr(fastppo.experiments.sweep, "run_workers", lambda *args: [])
        assert main([*command, "--trials", "1"]) == 0
    study = optuna.load_study(study_name="CartPole-v1", storage=f"sqlite:///{sweep}/sweep.db")
    space = {key: d for key, d in load_space().items() if key != "ppo.num_steps"}  # TINY sets --num-steps
    params = drawn(space)
    study.add_trial(optuna.trial.create_trial(state=TrialState.FAIL, params=params, distributions=space))
    scores = ["x"] if damage == "seed scores" else [20.0]
    study.add_trial(
        optuna.trial.create_trial(value=20.0, params=params, distributions=space, user_attrs={"seed_scores": scores})
    )
    if isinstance(damage, dict):
        study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, system_attrs=damage))
    elif damage == "settings":
        study.set_user_attr("fastppo_settings", "x")
    elif damage != "seed scores":  # a best trial whose learning rate the space never draws
        wide = {**space, "ppo.learning_rate": optuna.distributions.FloatDistribution(1e-5, 100.0, log=True)}
        study.add_trial(
            optuna.trial.create_trial(
                value=30.0,
                params={**params, "ppo.learning_rate": 50.0},
                distributions=wide,
                user_attrs={"seed_scores": [30.0]},
            )
        )
    for folder in (sweep / "trial_0" / "seed_1", sweep / "trial_1" / "seed_1", victim):
        folder.mkdir(parents=True)
        (folder / "kept.txt").write_text(str(folder))
    before, trials = tree(tmp_path), [(t.number, t.state) for t in study_trials(sweep)]
    capfd.readouterr()
    for trials_asked in ("3", "0"):  # continuing it, or only its table and preset
        assert main([*command, "--trials", trials_asked]) == 2
        err = capfd.readouterr().err
        assert (
            err.startswith("fastppo: error: study 'CartPole-v1'")
            and "is damaged: " + problem in err
            and len(err.strip().splitlines()) == 1
        )
        assert tree(tmp_path) == before and [(t.number, t.state) for t in study_trials(sweep)] == trials


@pytest.mark.filterwarnings("ignore:--total-timesteps 128 gives only 1 update")  # the run is only there to be refused
def test_a_sweep_into_a_run_folder_is_refused_and_writes_nothing(tmp_path, capfd):
    """A finished run given as --run-dir got a sweep.db and the trials' runs among its files."""
    run = tmp_path / "run"
    fastppo.train(
        "CartPole-v1", run_dir=run, total_timesteps=128, num_envs=2, num_steps=64, progress=False, tensorboard=False
    )
    before = tree(run)
    capfd.readouterr()
    assert (
        main(["sweep", "CartPole-v1", "--trials", "1", "--workers", "1", "--seeds", "1", *TINY, "--run-dir", str(run)])
        == 2
    )
    err = capfd.readouterr().err
    assert err.splitlines() == [
        f"fastppo: error: --run-dir {run} is a run's folder (config.yaml, metrics.jsonl, agent.json, ...): "
        "give --run-dir a folder of its own"
    ]
    assert tree(run) == before


def test_a_missing_sweep_extra_is_one_line(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` raises ImportError
    assert main(["sweep", "CartPole-v1", "--trials", "1"]) == 2
    assert (
        "needs the 'sweep' extra (optuna is missing): pip install -e \".[sweep]\" in the fastppo repository"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("text", "message"), [(None, "preset file missing.yaml not found"), ("ppo: [1, 2]", "cannot read preset")]
)
def test_a_bad_preset_file_is_one_line_and_exit_2(text, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if text is not None:
        Path("missing.yaml").write_text(text)
    assert main(["train", "CartPole-v1", "--preset", "missing.yaml", *TINY, "--run-dir", "run"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_stacks_pruning_report_is_the_mean_of_its_seeds_scores_so_far():
    trial = FakeTrial(prune_after=10)
    report = PruningReport(trial, total_timesteps=1000, stacked=True)
    report(128, {3: {}, 5: {}})  # no episode yet in either seed
    report(256, {3: {"charts/episodic_return": 10.0}, 5: {}})  # only seed 3 has a score
    report(300, {3: {"charts/episodic_return": 20.0}, 5: {"charts/episodic_return": 40.0}})
    report(350, {5: {"charts/episodic_return": 60.0}})  # seed 3 left the stack (--stop-return): its score stands
    assert trial.reports == [(250, 10.0), (300, 30.0), (350, 40.0)]


def test_workers_share_the_cores_between_their_stacks(tmp_path):
    """A trial's stack of seeds computes on every core by default; two workers at once each take
    half (else 2 x 2 threads on 2 cores: a 4-trial tensor sweep took 14.8-16.4 s, now 8.7-9.2 s)."""
    sweep = tmp_path / "sweep"
    assert (
        main(
            [
                "sweep",
                "CartPole-v1",
                "--backend",
                "tensor",
                "--trials",
                "2",
                "--workers",
                "2",
                "--seeds",
                "1-2",
                *TINY,
                "--run-dir",
                str(sweep),
            ]
        )
        == 0
    )
    configs = [yaml.safe_load(path.read_text()) for path in sweep.glob("trial_*/seed_*/config.yaml")]
    assert configs and all(c["run"]["torch_threads"] == max(1, available_cpus() // 2) for c in configs)
    assert "torch_threads" not in (sweep / "best.yaml").read_text()  # not a hyperparameter of the preset


def test_a_trial_on_tensor_envs_trains_its_seeds_as_one_stack(tmp_path, monkeypatch):
    from fastppo.experiments.sweep import Sweep, run_trial

    stacks = []
    train_seed_stack = fastppo.training.trainer.train_seed_stack
    monkeypatch.setattr(
        fastppo.training.trainer,
        "train_seed_stack",
        lambda config, seeds, *a, **k: stacks.append(seeds) or train_seed_stack(config, seeds, *a, **k),
    )
    monkeypatch.setattr(
        fastppo.training.trainer, "train", lambda *a, **k: pytest.fail("a trial on tensor envs trained a single run")
    )
    base = make_config(
        "CartPole-v1",
        overrides={"backend": "tensor", "num_envs": 2, "num_steps": 64, "total_timesteps": 512, "tensorboard": False},
    )
    space = {"ppo.learning_rate": optuna.distributions.FloatDistribution(1e-3, 1e-2, log=True)}
    sweep = Sweep(base, space, (1, 2), 1, tmp_path, "sqlite://", "s", 60, 0)
    trial = optuna.create_study(direction="maximize").ask()
    value = run_trial(trial, sweep)
    assert stacks == [[1, 2]]
    (stats,) = collect([tmp_path / f"trial_{trial.number}"], reps=10)
    assert stats.seeds == [1, 2] and stats.estimates["mean"].point == pytest.approx(value)
