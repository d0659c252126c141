"""Hyperparameter sweeps with Optuna: ``fastppo sweep ENV --trials N --workers K``.

- **Study.** One Optuna study (maximise) in one database: SQLite at RUN_DIR/sweep.db by default,
  any Optuna storage URL otherwise (postgresql://... lets machines share it). The settings it
  was started with (base config, space, seeds) are stored with it: the same command continues
  it, other settings are refused.
- **Trials.** TPE draws the space's fields (fastppo.experiments.sweep_space) over the base config (defaults
  <- preset <- flags); a trial trains one run per seed, one after another (on tensor envs all
  at once, as one stack: fastppo.training.seed_stack), into RUN_DIR/trial_<n>/seed_<s>. Its value is the
  mean over seeds of each run's final score as ``fastppo report`` computes it: the mean episodic
  return over the last 10% of the run's steps. A drawn combination the config refuses, a run that
  diverges (NaN) or finishes no episode ends the trial as pruned, the reason in its user attribute
  ``pruned_because``.
- **Pruning.** The first seed's run reports its score so far (the same final-window score over
  the steps trained) at 20 evenly spaced points of the budget, the same steps whatever a trial's
  batch size, and Optuna's median pruner stops a trial below the median of earlier trials at
  that step (once 5 trials have completed, and not in the first third of the budget). The other
  seeds run only for trials the first one got through, unpruned. A stack reports the mean of its
  seeds' scores so far and is pruned whole.
- **Workers.** K spawned processes share the study; each loops: the study holds N finished
  (complete or pruned) trials -> stop; else finished + running < N -> run a trial (a queued
  retry first); else wait (the last trials run elsewhere, and should one's process die its retry
  needs a worker). Of two trials that two workers started for the last slot at once, the later
  fails at its start, uncounted.
- **Kills.** A running trial's heartbeat goes to the database every ``heartbeat`` seconds; a
  trial silent for twice as long (its process killed) is failed and queued again with the same
  hyperparameters (up to 3 times), its partial runs deleted when the retry starts. The database
  is data: what the sweep reads of it is checked first (``check_trial_data``), so a crafted one
  names no folder to delete. A retry
  queued after other trials took the free slots stays queued for a later, larger sweep. Ctrl-C
  stops the runs after their iteration; their trials are failed, their runs deleted, and queued again.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import multiprocessing
import shutil
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import optuna
import sqlalchemy  # its event and exc modules come with it
import yaml
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
    distribution_to_json,
)
from optuna.exceptions import ExperimentalWarning
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial, TrialState

from fastppo.config import Config, apply_overrides
from fastppo.errors import FastPPOError
from fastppo.experiments.plot import NOT_HYPERPARAMETERS, RETURN, Run, read_run
from fastppo.experiments.report import final_score
from fastppo.experiments.seeds import stack_threads
from fastppo.experiments.sweep_space import suggest
from fastppo.files.outputs import output_file, writing

FINAL_WINDOW = 0.1
"""A run's final score: its mean return over this last fraction of its steps (fastppo report's default)."""
PRUNE_POINTS = 20
"""Intermediate scores per trial, at evenly spaced steps of the budget."""
MAX_RETRY = 3
"""Retries of a trial whose process died, before it is given up."""
WAIT_SECONDS = 1.0
"""How often a worker with no free slot looks at the study again (at most)."""
SETTINGS = "fastppo_settings"
PRUNED_BECAUSE = "pruned_because"
SEED_SCORES = "seed_scores"
PRESET_SECTIONS = ("env", "ppo", "policy", "multi_agent")
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass(frozen=True)
class Sweep:
    """What the command and every worker process need to run the study's trials."""

    base: Config
    """Every trial's config before its drawn fields: defaults <- preset <- flags."""
    space: dict[str, BaseDistribution]
    seeds: tuple[int, ...]
    n_trials: int
    folder: Path
    storage: str
    study_name: str
    heartbeat: int
    sampler_seed: int


class SurplusTrial(Exception):
    """A trial started when the study already had its trials (two workers took the last slot)."""


class Interrupted(Exception):
    """A worker's run stopped on Ctrl-C / SIGTERM."""


def open_storage(url: str, heartbeat: int) -> optuna.storages.RDBStorage:
    """The study's database, with heartbeats that let a killed worker's trial be failed and retried."""
    sqlite = url.startswith("sqlite:")
    # SQLite locks the whole file per write: wait for the other workers rather than fail at once.
    engine = {"connect_args": {"timeout": 60}} if sqlite else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)  # heartbeats are 'experimental' since Optuna 2.9
            storage = optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine,
                heartbeat_interval=heartbeat,
                grace_period=2 * heartbeat,
                heartbeat_stale_trial_callback=retry_stale_trial,
            )
    except (
        sqlalchemy.exc.SQLAlchemyError,
        ImportError,
        ValueError,
    ) as exc:  # a bad URL, a missing driver, an unwritable file
        raise FastPPOError(f"cannot open --storage {url}: {str(exc).splitlines()[0]}") from None
    if sqlite:
        write_locked_transactions(storage.engine)
    return storage


def write_locked_transactions(engine: sqlalchemy.engine.Engine) -> None:
    """Every transaction on this SQLite engine takes the database's write lock when it begins.

    Optuna hands a queued trial (a killed trial's retry) to a worker by reading it WAITING and then
    setting it RUNNING, with SELECT ... FOR UPDATE, which SQLite ignores; and Python's sqlite3
    begins a transaction only at its first write. Two workers could then both read the trial
    WAITING, both set it RUNNING, and both run it (the second's result refused: "Cannot tell a
    COMPLETE trial"). Beginning with BEGIN IMMEDIATE makes the read and the write one locked step
    (SQLAlchemy's recipe for pysqlite); other databases lock the row as asked."""

    @sqlalchemy.event.listens_for(engine, "connect")
    def own_transactions(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None  # sqlite3 issues no BEGIN of its own

    @sqlalchemy.event.listens_for(engine, "begin")
    def begin_locked(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened while optuna made its tables get the two hooks when reopened


def retry_stale_trial(study: optuna.Study, trial: FrozenTrial) -> None:
    """Heartbeat callback: a trial whose process died runs again with the same hyperparameters."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)(study, trial)
        retried = len(RetryHeartbeatStaleTrialCallback.retry_history(trial)) < MAX_RETRY
    print(
        f"fastppo: trial {trial.number}: its worker stopped (no heartbeat); "
        f"{'queued again' if retried else f'given up after {MAX_RETRY} retries'}",
        flush=True,
    )


def fail_orphaned_trials(study: optuna.Study, storage: optuna.storages.RDBStorage, suspects: set[int]) -> set[int]:
    """Fail and queue again the trials whose worker died before their first heartbeat.

    Optuna's stale check (``fail_stale_trials``) looks only at trials that have a heartbeat: a
    worker killed between creating its trial and recording the first one leaves that trial RUNNING
    for ever, and the workers of a continued sweep wait for it. A live worker records the first
    heartbeat milliseconds after creating its trial, so a trial found RUNNING without one at two
    checks in a row (a wait apart) is an orphan: it is failed and queued again, as a stale one is.
    Returns this check's heartbeat-less trials: the ``suspects`` of the next. ``storage`` is the
    study's database (``open_storage``)."""
    query = sqlalchemy.text(
        "SELECT trials.trial_id FROM trials LEFT JOIN trial_heartbeats ON trial_heartbeats.trial_id = trials.trial_id "
        "WHERE trials.study_id = :study AND trials.state = 'RUNNING' AND trial_heartbeats.trial_id IS NULL"
    )
    with storage.engine.connect() as connection:
        found = {row[0] for row in connection.execute(query, {"study": study._study_id})}
    for trial_id in sorted(found & suspects):
        try:
            failed = storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:  # another worker failed it first
            continue
        if failed:
            retry_stale_trial(study, copy.deepcopy(storage.get_trial(trial_id)))
    return found


def settings(sweep: Sweep) -> dict[str, Any]:
    """What makes a study the same experiment, as stored with it."""
    config = {
        f"{s}.{k}": v
        for s, values in sweep.base.to_dict().items()
        for k, v in values.items()
        if f"{s}.{k}" not in NOT_HYPERPARAMETERS
    }
    record = {
        "config": config,
        "space": {key: distribution_to_json(d) for key, d in sweep.space.items()},
        "seeds": list(sweep.seeds),
    }
    return json.loads(json.dumps(record))  # tuples become lists, as the database gives them back


def open_study(
    sweep: Sweep,
    create: bool,
    sampler: optuna.samplers.BaseSampler | None = None,
    storage: optuna.storages.RDBStorage | None = None,
) -> optuna.Study:
    """The sweep's study in ``storage`` (by default ``open_storage`` of the sweep's URL): created
    (or continued) with ``create``, else loaded; its stored settings must be this sweep's."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # fastppo prints one line per trial itself
    storage = storage or open_storage(sweep.storage, sweep.heartbeat)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=sweep.base.ppo.total_timesteps // 3)
    try:
        if create:
            study = optuna.create_study(
                storage=storage,
                sampler=sampler,
                pruner=pruner,
                study_name=sweep.study_name,
                direction="maximize",
                load_if_exists=True,
            )
        else:
            study = optuna.load_study(storage=storage, sampler=sampler, pruner=pruner, study_name=sweep.study_name)
    except KeyError:
        raise FastPPOError(
            f"no study '{sweep.study_name}' in {sweep.storage}: start it with --trials N (N > 0)"
        ) from None
    record, saved = settings(sweep), study.user_attrs.get(SETTINGS)
    if saved is None:
        if study.trials:
            raise FastPPOError(
                f"study '{sweep.study_name}' in {sweep.storage} was not started by fastppo sweep: pick another "
                "--study-name"
            )
        if any(sweep.folder.glob("trial_*")):
            raise FastPPOError(f"{sweep.folder} holds another sweep's trials: pick another --run-dir (or --study-name)")
        study.set_user_attr(SETTINGS, record)
    elif not (isinstance(saved, dict) and saved.keys() == record.keys() and isinstance(saved["config"], dict)):
        raise damaged(sweep, f"its stored settings are {excerpt(saved)}, not fastppo sweep's")
    elif saved != record:
        keys = sorted({*saved["config"], *record["config"]})
        changed = [k for k in keys if saved["config"].get(k) != record["config"].get(k)] + [
            part for part in ("space", "seeds") if saved[part] != record[part]
        ]
        raise FastPPOError(
            f"study '{sweep.study_name}' was started with other settings ({', '.join(changed)} differ): "
            "continue it with the command that started it, or pick another --study-name"
        )
    trials = study.get_trials(deepcopy=False)
    for trial in trials:
        check_trial_data(trial, trials, sweep)
    return study


def damaged(sweep: Sweep, problem: str) -> FastPPOError:
    return FastPPOError(
        f"study '{sweep.study_name}' in {sweep.storage} is damaged: {problem} (fastppo sweep acts on none of it: "
        "start a new sweep with another --run-dir or --study-name)"
    )


def check_trial_data(trial: FrozenTrial, trials: list[FrozenTrial], sweep: Sweep) -> None:
    """A FastPPOError unless what the sweep reads of ``trial`` from the database is what fastppo
    sweep writes: its hyperparameters drawn from the sweep's space, a complete trial's score per
    seed, and its retry history (see ``retry_attempts``). A crafted database is data, never a
    path to delete or a value taken on trust."""
    if not drawn_from(sweep.space, trial):
        raise damaged(sweep, f"trial {trial.number}'s hyperparameters are not drawn from the sweep's space")
    scores = trial.user_attrs.get(SEED_SCORES)
    if trial.state == TrialState.COMPLETE and not (
        isinstance(scores, list)
        and len(scores) == len(sweep.seeds)
        and all(is_number(s) and math.isfinite(s) for s in scores)
    ):
        raise damaged(
            sweep, f"trial {trial.number}'s scores per seed are {excerpt(scores)}, not {len(sweep.seeds)} numbers"
        )
    retry_attempts(trial, trials, sweep)


def drawn_from(space: dict[str, BaseDistribution], trial: FrozenTrial) -> bool:
    """Whether ``trial``'s hyperparameters, drawn or enqueued (a retry's), are values of ``space``."""
    fixed = trial.system_attrs.get("fixed_params", {})
    if not isinstance(fixed, dict) or any(
        space.get(key) != distribution for key, distribution in trial.distributions.items()
    ):
        return False
    return all(key in space and within(space[key], value) for key, value in {**trial.params, **fixed}.items())


def excerpt(value: Any) -> str:
    """``value`` as Python writes it, cut short: what a damaged database holds, shown in one line."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def is_number(value: Any, kind: type | tuple[type, ...] = (int, float)) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)  # True is an int to Python, not to a sweep


def within(distribution: BaseDistribution, value: Any) -> bool:
    """Whether ``value`` is one that ``distribution`` draws (of its type: 1 is not True)."""
    if isinstance(distribution, CategoricalDistribution):
        return any(type(value) is type(choice) and value == choice for choice in distribution.choices)
    assert isinstance(distribution, IntDistribution | FloatDistribution)  # what a sweep space holds besides choices
    kind = int if isinstance(distribution, IntDistribution) else (int, float)
    return is_number(value, kind) and distribution.low <= value <= distribution.high


def retry_attempts(trial: FrozenTrial, trials: list[FrozenTrial], sweep: Sweep) -> list[int]:
    """The numbers of the earlier attempts that ``trial`` retries (a killed worker's trials), whose
    partial runs its start deletes: checked to be the numbers of failed, earlier trials of the
    study (``trials``), never a text that could name a folder outside the sweep."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)  # retry_history, like the heartbeats
        attempts = RetryHeartbeatStaleTrialCallback.retry_history(trial)
    failed = {t.number for t in trials if t.state == TrialState.FAIL and t.number < trial.number}
    if not (isinstance(attempts, list) and all(is_number(n, int) and n in failed for n in attempts)):
        raise damaged(
            sweep, f"trial {trial.number}'s retry history is {excerpt(attempts)}, not earlier failed trials' numbers"
        )
    return attempts


def run_workers(sweep: Sweep, workers: int, study: optuna.Study) -> list[int]:
    """K worker processes until the study holds ``sweep.n_trials`` finished trials; the indices of
    those that failed. Ctrl-C reaches the workers too (one process group): they stop after their
    current iteration and are waited for before the KeyboardInterrupt goes on."""
    remaining = sweep.n_trials - len(study.get_trials(deepcopy=False, states=FINISHED))
    started = len(study.trials)
    # spawn, not fork: a forked child would inherit torch's thread pools and the parent's database connections.
    context = multiprocessing.get_context("spawn")
    count = min(workers, max(remaining, 0))
    if (
        len(sweep.seeds) > 1
    ):  # a trial's stack of seeds takes every core by default: with K workers at once, each its share
        sweep = dataclasses.replace(sweep, base=stack_threads(sweep.base, max(count, 1)))
    processes = [
        context.Process(target=run_worker, args=(sweep, index, started), name=f"fastppo-sweep-{index}")
        for index in range(count)
    ]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join()
    except KeyboardInterrupt:
        for process in processes:
            process.join()
        raise
    return [index for index, process in enumerate(processes) if process.exitcode]


def run_worker(sweep: Sweep, index: int, started: int) -> None:
    """One worker process: run trials while the study lacks finished ones (module docstring)."""
    # Seeded per worker (else parallel workers draw the same start-up trials) and per re-run
    # (else a continued sweep redraws the first trials' values).
    seed = int(np.random.SeedSequence([sweep.sampler_seed, started, index]).generate_state(1)[0])
    objective = functools.partial(run_trial, sweep=sweep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)  # as fail_stale_trials is
        suspects: set[int] = set()
        try:
            storage = open_storage(sweep.storage, sweep.heartbeat)
            study = open_study(sweep, create=False, sampler=optuna.samplers.TPESampler(seed=seed), storage=storage)
            while True:
                optuna.storages.fail_stale_trials(study)  # a killed worker's trials, also while this one waits
                suspects = fail_orphaned_trials(
                    study, storage, suspects
                )  # and those killed before their first heartbeat
                states = Counter(t.state for t in study.get_trials(deepcopy=False))
                finished = states[TrialState.COMPLETE] + states[TrialState.PRUNED]
                if finished >= sweep.n_trials:
                    return
                if finished + states[TrialState.RUNNING] >= sweep.n_trials:
                    time.sleep(min(sweep.heartbeat, WAIT_SECONDS))
                    continue
                study.optimize(objective, n_trials=1, catch=(SurplusTrial,), callbacks=[print_trial])
        except (Interrupted, KeyboardInterrupt):
            return
        except (
            FastPPOError
        ) as exc:  # the database damaged while the sweep ran: the command's one line, from this process
            print(f"fastppo: error: {exc}", file=sys.stderr, flush=True)
            sys.exit(2)


def run_trial(trial: optuna.Trial, sweep: Sweep) -> float:
    """One trial: the drawn config trained once per seed; the mean of the runs' final scores."""
    from fastppo.training.trainer import train, train_seed_stack

    trials = trial.study.get_trials(deepcopy=False)
    # As the worker's count, plus a tie-break: of two trials started for the last slot, the later one yields.
    if (
        sum(t.state in FINISHED or (t.state == TrialState.RUNNING and t.number < trial.number) for t in trials)
        >= sweep.n_trials
    ):
        raise SurplusTrial(f"the study already has its {sweep.n_trials} trials")
    this = next(t for t in trials if t.number == trial.number)
    for attempt in retry_attempts(this, trials, sweep):  # a killed attempt's partial runs (rmtree never follows a link)
        shutil.rmtree(sweep.folder / f"trial_{attempt}", ignore_errors=True)
    folder = sweep.folder / f"trial_{trial.number}"
    try:
        config = apply_overrides(copy.deepcopy(sweep.base), suggest(trial, sweep.space)).validate()
        config.run.progress = False
        total = config.ppo.total_timesteps
        if (
            config.env.backend == "tensor" and len(sweep.seeds) > 1
        ):  # the seeds as one stack (the sweep's workers are its processes)
            agents = train_seed_stack(
                config, list(sweep.seeds), folder, on_iteration=PruningReport(trial, total, stacked=True)
            )
        else:  # one after another, the first reporting for the pruner
            agents = []
            for seed in sweep.seeds:
                run = dataclasses.replace(config, run=dataclasses.replace(config.run, seed=seed))
                agents.append(
                    train(run, folder / f"seed_{seed}", on_iteration=None if agents else PruningReport(trial, total))
                )
                if agents[-1].interrupted_by is not None:
                    break
        if (
            agents[-1].interrupted_by is not None
        ):  # queued again, as a killed trial is; cut short, its runs would mislead fastppo report
            trial.study.enqueue_trial(trial.params)
            shutil.rmtree(folder, ignore_errors=True)
            raise Interrupted
        scores = [final_score(read_run(folder / f"seed_{seed}"), RETURN, FINAL_WINDOW) for seed in sweep.seeds]
    except FastPPOError as exc:  # a combination the config refuses, a run that diverged, no episode finished
        trial.set_user_attr(PRUNED_BECAUSE, str(exc))
        raise optuna.TrialPruned(str(exc)) from None
    trial.set_user_attr(SEED_SCORES, scores)
    return float(np.mean(scores))


class PruningReport:
    """``on_iteration`` hook of a trial's first run, or of its seeds trained as one stack
    (``stacked``: the mean over the seeds): the score so far (the final-window score over the
    steps trained) reported at PRUNE_POINTS evenly spaced steps of the budget, and the trial
    pruned when the pruner says so."""

    def __init__(self, trial: optuna.Trial, total_timesteps: int, stacked: bool = False):
        self.trial, self.total, self.stacked = trial, total_timesteps, stacked
        self.records: dict[int | None, list[dict[str, Any]]] = {}  # per seed of a stack (None: the one run)
        self.reported = 0

    def __call__(self, global_step: int, metrics: dict[str, float] | dict[int, dict[str, float]]) -> None:
        # a stack's metrics per seed, a run's its own
        per_run = (
            cast(dict[int, dict[str, float]], metrics).items()
            if self.stacked
            else [(None, cast(dict[str, float], metrics))]
        )
        for run, run_metrics in per_run:
            self.records.setdefault(run, []).append({"global_step": global_step, RETURN: run_metrics.get(RETURN)})
        point = global_step * PRUNE_POINTS // self.total
        scored = [records for records in self.records.values() if any(r[RETURN] is not None for r in records)]
        if point <= self.reported or not scored:
            return
        self.reported = point
        score = float(np.mean([final_score(Run(Path(), {}, records), RETURN, FINAL_WINDOW) for records in scored]))
        self.trial.report(score, point * self.total // PRUNE_POINTS)
        if self.trial.should_prune():
            reason = f"score {score:.1f} at step {global_step} below the median of earlier trials"
            self.trial.set_user_attr(PRUNED_BECAUSE, reason)
            raise optuna.TrialPruned(reason)


def print_trial(study: optuna.Study, trial: FrozenTrial) -> None:
    """One line per finished trial (a surplus one, failed before it drew anything, says nothing)."""
    if trial.state == TrialState.COMPLETE:
        outcome = f"{trial.value:.1f} (seeds {', '.join(f'{s:.1f}' for s in trial.user_attrs[SEED_SCORES])})"
    elif trial.state == TrialState.PRUNED:
        outcome = f"pruned: {trial.user_attrs.get(PRUNED_BECAUSE, '')}"
    else:
        return
    print(
        f"fastppo: trial {trial.number}: {outcome}; "
        f"{' '.join(f'{short(k)}={shown(v)}' for k, v in trial.params.items())}",
        flush=True,
    )


def short(key: str) -> str:
    return key.split(".", 1)[1]


def shown(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _value(trial: FrozenTrial) -> float:
    """A complete trial's value (optuna's type allows None, for the other states)."""
    assert trial.value is not None
    return trial.value


def best_table(study: optuna.Study, sweep: Sweep, top: int = 5) -> str:
    """A count of the study's trials and a Markdown table of its ``top`` complete ones."""
    states = Counter(t.state for t in study.trials)
    count = (
        f"study '{sweep.study_name}': {states[TrialState.COMPLETE]} complete, {states[TrialState.PRUNED]} "
        f"pruned, {states[TrialState.FAIL]} failed trials"
    )
    best = sorted(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=lambda t: -_value(t))[:top]
    if not best:
        return count
    keys = list(sweep.space)
    rows = [["trial", "score", *map(short, keys)], ["--:"] * (2 + len(keys))]
    rows += [[str(t.number), f"{t.value:.1f}", *(shown(t.params[k]) for k in keys)] for t in best]
    caption = (
        f"{count}; the best by mean final return over seeds {','.join(map(str, sweep.seeds))} (each run's "
        f"last {FINAL_WINDOW:.0%} of steps):"
    )
    return "\n".join([caption, "", *("| " + " | ".join(row) + " |" for row in rows)])


def write_best_preset(study: optuna.Study, sweep: Sweep, path: Path) -> FrozenTrial | None:
    """The best complete trial's config as a preset YAML at ``path`` (every env/ppo/policy field
    that differs from the defaults, so ``fastppo train ENV --preset PATH`` trains that config);
    None, and nothing written, while no trial has completed."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return None
    best = max(complete, key=_value)
    config = apply_overrides(copy.deepcopy(sweep.base), best.params).to_dict()
    defaults = Config().to_dict()
    fields = {
        section: changed
        for section in PRESET_SECTIONS
        if (
            changed := {
                k: list(v) if isinstance(v, tuple) else v
                for k, v in config[section].items()
                if v != defaults[section][k] and k != "env_id"
            }
        )
    }
    states = Counter(t.state for t in study.trials)
    description = (
        f"fastppo sweep of {sweep.base.env.env_id}, study '{sweep.study_name}' ({states[TrialState.COMPLETE]} "
        f"complete and {states[TrialState.PRUNED]} pruned trials, TPE sampler, median pruner): trial "
        f"{best.number} scored {best.value:.1f}, the mean over seeds {','.join(map(str, sweep.seeds))} "
        f"({', '.join(f'{s:.1f}' for s in best.user_attrs[SEED_SCORES])}) of each run's mean return over the "
        f"last {FINAL_WINDOW:.0%} of its {sweep.base.ppo.total_timesteps} steps; tuned: "
        f"{', '.join(map(short, sweep.space))}."
    )
    with writing(output_file(path, "the best preset"), "the best preset"):
        path.write_text(yaml.safe_dump({"description": description, **fields}, sort_keys=False, width=100))
    return best
