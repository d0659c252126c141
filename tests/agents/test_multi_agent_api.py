"""Multi-agent runs as users read and deploy them: each agent group's return reported apart
(a competitive env's sum means nothing), a headline only for a team or a named group, and
``agent.act`` on PettingZoo's own observations (tests/support/fake_pz_teams.py, tests/support/fake_pz_envs.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import fastppo
from fastppo.agents.evaluation import agent_rows_env
from fastppo.cli.main import main
from fastppo.envs.pettingzoo_vec import make_parallel_env
from fastppo.training.trainer import progress_summary, train
from tests.support.paths import ROOT

CHASE = "pz:tests.support.fake_pz_teams"
RELAY = "pz:tests.support.fake_pz_envs"
TINY = [
    "--num-envs",
    "2",
    "--num-steps",
    "8",
    "--num-minibatches",
    "2",
    "--update-epochs",
    "1",
    "--no-progress",
    "--no-tensorboard",
]
GUIDE = ROOT / "docs" / "guides" / "multi-agent.md"


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_competitive_run_logs_each_groups_return_and_no_team_sum(tmp_path, capsys):
    """Chase: adversaries +t, agent -t at step t of 3: adversary 2 x 6 = 12, agent -6 exactly;
    their sum (6) stands for nothing and is not logged."""
    run = tmp_path / "run"
    assert main(["train", CHASE, *TINY, "--total-timesteps", "32", "--run-dir", str(run)]) == 0
    logged = [r for r in records(run) if r["charts/episodes"]]
    assert len(logged) == 2 and all(
        r["charts/episodes"] == 4 for r in logged
    )  # 16 steps of 2 copies: 4 episodes of 3 + reset rows
    for r in logged:
        assert "charts/episodic_return" not in r
        assert (r["charts/episodic_return/adversary"], r["charts/episodic_return/agent"]) == (12.0, -6.0)
        assert (
            r["charts/agent_return/adversary_0"],
            r["charts/agent_return/agent_0"],
            r["charts/episodic_length"],
        ) == (6.0, -6.0, 3.0)
    assert "mean returns over the last 8 episodes: adversary 12.0, agent -6.0" in capsys.readouterr().out
    assert main(["eval", str(run), "--episodes", "2", "--env-id", CHASE]) == 0
    assert "returns adversary 12.0 ± 0.0, agent -6.0 ± 0.0, length 3.0 ± 0.0 over 2 episodes" in capsys.readouterr().out
    assert main(["eval", str(run), "--episodes", "2", "--env-id", CHASE, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["mean_return"], result["mean_group_returns"], result["episodes"]) == (
        None,
        {"adversary": 12.0, "agent": -6.0},
        2,
    )
    # plot draws each group's curve; report names the metric to pick
    assert (
        main(["plot", str(run), "--out", str(tmp_path / "plot.png")]) == 0
        and (tmp_path / "plot.png").stat().st_size > 0
    )
    capsys.readouterr()
    pytest.importorskip("rliable")
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "--metric charts/episodic_return/adversary" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("headline", "expected"), [("team", 6.0), ("adversary", 12.0), ("agent", -6.0)])
def test_the_headline_is_the_team_sum_or_the_group_named(tmp_path, capsys, headline, expected):
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                CHASE,
                *TINY,
                "--total-timesteps",
                "16",
                "--multi-agent.headline",
                headline,
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    (record,) = records(run)
    assert record["charts/episodic_return"] == expected and record["charts/episodic_return/adversary"] == 12.0
    assert main(["eval", str(run), "--episodes", "2", "--env-id", CHASE]) == 0
    assert f"return {expected:.1f} ± 0.0 (adversary 12.0 ± 0.0, agent -6.0 ± 0.0)" in capsys.readouterr().out


def test_a_team_of_one_group_keeps_its_sum_as_headline(tmp_path):
    """Relay's agent_0..2 are one group: the headline is their sum, equal to the group's."""
    run = tmp_path / "run"
    assert main(["train", RELAY, *TINY, "--total-timesteps", "32", "--run-dir", str(run)]) == 0
    record = records(run)[-1]
    assert record["charts/episodic_return"] == record["charts/episodic_return/agent"]
    assert record["charts/episodic_return"] == pytest.approx(
        sum(record[f"charts/agent_return/agent_{i}"] for i in range(3))
    )


@pytest.mark.parametrize(
    ("headline", "stop", "stopped_at"),
    [("adversary", "12", 16), ("adversary", "12.5", None), ("agent", "6", None), ("team", "6", 16)],
)
def test_stop_return_reads_the_named_groups_mean(tmp_path, capsys, headline, stop, stopped_at):
    """The adversaries' mean is 12 from the first iteration on, the agent's -6, the team's 6: a
    run stops on the group it names, never on another's or the sum's."""
    run = tmp_path / "run"
    argv = [
        "train",
        CHASE,
        *TINY,
        "--total-timesteps",
        "48",
        "--stop-return",
        stop,
        "--stop-window",
        "2",
        "--multi-agent.headline",
        headline,
        "--run-dir",
        str(run),
    ]
    assert main(argv) == 0
    out = "".join(capsys.readouterr())
    assert records(run)[-1]["global_step"] == (stopped_at or 48)
    assert (f"reached --run.stop-return {float(stop):g} at step {stopped_at}: stopped" in out) == (
        stopped_at is not None
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stop-return", "10"], "name the one it reads, e.g. --multi-agent.headline adversary"),
        (
            ["--multi-agent.headline", "prey"],
            "--multi-agent.headline prey is no group of this env's agents (adversary, agent)",
        ),
    ],
)
def test_a_headline_that_cannot_be_read_is_one_line(tmp_path, capsys, argv, message):
    assert main(["train", CHASE, *TINY, "--total-timesteps", "16", *argv, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_the_progress_bar_shows_each_groups_return():
    config = fastppo.make_config(CHASE, "cleanrl-discrete", {})
    envs = agent_rows_env_for(config)
    assert [label for label, _, _ in progress_summary(envs)] == ["SPS", "adversary", "agent", "kl", "clip"]
    envs.close()
    config.multi_agent.headline = "team"
    envs = agent_rows_env_for(config)
    assert [label for label, _, _ in progress_summary(envs)] == ["SPS", "return", "adversary", "agent", "kl", "clip"]
    envs.close()


def agent_rows_env_for(config):
    from fastppo.envs import make_vec_env

    return make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)


def rows_and_dicts(agent, env_id: str, env_kwargs: dict, steps: int = 4):
    """(the rows training builds, PettingZoo's own observations) of the same steps, the actions
    taken by ``agent`` on the rows (deterministic), for ``steps`` steps of one copy."""
    envs = agent_rows_env(agent, env_id)
    env = make_parallel_env(env_id, env_kwargs)
    step, (observations, _) = envs.reset(seed=0), env.reset(seed=0)
    for _ in range(steps):
        actions = agent.act(step.obs, deterministic=True, action_mask=step.action_mask)
        yield actions, observations
        if not env.agents:
            step, (observations, _) = envs.step(torch.as_tensor(actions)), env.reset()
            continue
        step = envs.step(torch.as_tensor(actions))
        observations = env.step({name: actions[i] for i, name in enumerate(env.possible_agents) if name in env.agents})[
            0
        ]
    envs.close()
    env.close()


@pytest.mark.parametrize(
    "overrides",
    [
        {"multi_agent.algorithm": "mappo", "normalize_obs": True},
        {
            "env_kwargs": json.dumps({"agents": ["adversary_0", "agent_0", "agent_1"]}),
            "multi_agent.policies": "group",
            "multi_agent.headline": "team",
        },
    ],
    ids=["shared-mappo-normalized", "group-policies"],
)
def test_act_on_pettingzoo_observations_takes_the_actions_training_takes(tmp_path, overrides):
    """The same actions as the rows the training envs build, step by step (the dead agent_1 left
    out of the dict as PettingZoo leaves it out), for the trained agent and the one loaded from
    its folder."""
    config = fastppo.make_config(
        RELAY,
        "cleanrl-discrete",
        {
            "num_envs": 2,
            "num_steps": 12,
            "num_minibatches": 2,
            "total_timesteps": 48,
            "progress": False,
            "tensorboard": False,
        }
        | overrides,
    )
    trained = train(config, tmp_path / "run")
    loaded = fastppo.load(tmp_path / "run")
    env_kwargs = json.loads(overrides.get("env_kwargs", "{}"))
    played = 0
    for rows_actions, observations in rows_and_dicts(trained, RELAY, env_kwargs, steps=8):
        names = [name for name in make_parallel_env(RELAY, env_kwargs).possible_agents if name in observations]
        expected = {
            name: rows_actions[i]
            for i, name in enumerate(make_parallel_env(RELAY, env_kwargs).possible_agents)
            if name in observations
        }
        for agent in (trained, loaded):
            actions = agent.act(observations, deterministic=True)
            assert list(actions) == names and actions == expected
        played += 1
    assert played == 8


def test_act_honours_the_action_mask_of_a_dict_observation(tmp_path):
    """Chase's Dict observations allow one action each: act takes it, stochastic or not (the env
    asserts it, in training too), and an infos mask given as action_mask= is honoured."""
    config = fastppo.make_config(
        CHASE,
        "cleanrl-discrete",
        {
            "num_envs": 2,
            "num_steps": 8,
            "num_minibatches": 2,
            "total_timesteps": 32,
            "progress": False,
            "tensorboard": False,
            "env_kwargs": json.dumps({"masked": True}),
        },
    )
    agent = train(config)
    assert agent.action_masks
    env = make_parallel_env(CHASE, {"masked": True})
    observations, _ = env.reset(seed=0)
    torch.manual_seed(0)
    while env.agents:
        for deterministic in (True, False):
            actions = agent.act(observations, deterministic=deterministic)
            assert actions == {name: int(np.flatnonzero(observations[name]["action_mask"])[0]) for name in env.agents}
        observations = env.step(actions)[0]
    plain = {name: obs["observation"] for name, obs in env.reset(seed=0)[0].items()}
    with pytest.raises(ValueError, match="trained with action masks"):
        agent.act(plain)
    masks = {"adversary_0": np.array([0, 0, 1]), "adversary_1": np.array([1, 0, 0]), "agent_0": np.array([0, 1, 0])}
    assert agent.act(plain, action_mask=masks) == {"adversary_0": 2, "adversary_1": 0, "agent_0": 1}


def test_a_recurrent_policy_steps_each_agent_with_its_own_state():
    """step({agent: obs}, {agent: state}) equals the rows' step with the rows' states stacked."""
    config = fastppo.make_config(
        RELAY,
        "cleanrl-discrete",
        {
            "num_envs": 2,
            "num_steps": 12,
            "num_minibatches": 2,
            "total_timesteps": 48,
            "progress": False,
            "tensorboard": False,
            "policy.memory": "gru",
            "policy.memory_size": 8,
        },
    )
    agent = train(config)
    env = make_parallel_env(RELAY, {})
    observations, _ = env.reset(seed=0)
    states = agent.initial_state(env.possible_agents)
    rows_state = agent.initial_state(3)
    envs = agent_rows_env(agent, RELAY)
    step = envs.reset(seed=0)
    for _ in range(3):  # all three agents alive
        rows_actions, rows_state = agent.step(step.obs, rows_state, deterministic=True)
        actions, states = agent.step(observations, states, deterministic=True)
        assert actions == dict(zip(env.possible_agents, rows_actions.tolist()))
        torch.testing.assert_close(torch.stack([states[name] for name in env.possible_agents]), rows_state)
        observations = env.step({name: actions[name] for name in env.agents})[0]
        step = envs.step(torch.as_tensor(rows_actions))
        if "agent_1" not in observations:
            break
    with pytest.raises(ValueError, match="no state for 'agent_0'"):
        agent.step(observations, {})
    envs.close()


def test_act_refuses_what_it_cannot_read():
    agent = train(
        fastppo.make_config(
            RELAY,
            "cleanrl-discrete",
            {
                "num_envs": 2,
                "num_steps": 12,
                "num_minibatches": 2,
                "total_timesteps": 24,
                "progress": False,
                "tensorboard": False,
            },
        )
    )
    with pytest.raises(ValueError, match="'spy', an agent the policy was not trained on"):
        agent.act({"spy": np.zeros(2, dtype=np.float32)})
    assert agent.act({}) == {}
    gym_agent = train(
        fastppo.make_config(
            "CartPole-v1",
            "cleanrl-discrete",
            {
                "num_envs": 2,
                "num_steps": 8,
                "num_minibatches": 2,
                "total_timesteps": 16,
                "progress": False,
                "tensorboard": False,
            },
        )
    )
    with pytest.raises(ValueError, match="trained on a PettingZoo env"):
        gym_agent.act({"agent_0": np.zeros(4)})


def test_the_readme_loop_runs_a_trained_agent_in_a_pettingzoo_env(tmp_path):
    """The multi-agent guide's deployment loop, as written there, on simple_spread."""
    text = GUIDE.read_text()
    loop = re.search(r"<!-- deploy-loop -->\n```python\n(.*?)```", text, re.S).group(1)
    assert len(loop.strip().splitlines()) <= 12
    run = tmp_path / "spread"
    assert (
        main(
            [
                "train",
                "pz:mpe2.simple_spread_v3",
                "--env-kwargs",
                '{"max_cycles": 5}',
                *TINY,
                "--total-timesteps",
                "16",
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    namespace: dict = {}
    exec(loop.replace("runs/spread", str(run)), namespace)
    assert namespace["steps"] == 25  # simple_spread's default max_cycles
