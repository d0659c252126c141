"""Multi-agent PettingZoo envs (pz:<module>): agents as batch rows, dead agents masked, IPPO and
MAPPO critics, one shared policy, and every trainer feature on top (tests/support/fake_pz_envs.py)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import gymnasium
import mpe2.all_modules
import numpy as np
import pytest
import torch

import fastppo
from fastppo.agents.agent import build_agent
from fastppo.cli.main import main
from fastppo.core import compute_gae, shift_values
from fastppo.envs import make_vec_env
from fastppo.envs.snapshot import restore_envs, snapshot_envs
from fastppo.errors import FastPPOError
from fastppo.profiling import SectionTimer
from fastppo.training.resume import resume_config
from fastppo.training.rollout import EnvCursor, ObservationNormalizer, RolloutBuffer, collect_rollout
from fastppo.training.trainer import check_finite_rollout, train
from tests.support.multi_agent import RELAY, TINY
from tests.support.resume import ITERATIONS, assert_same_run, stop_after


def relay_config(**overrides):
    return fastppo.make_config(RELAY, "cleanrl-discrete", TINY | overrides)


def rollout(config, steps: int = 12):
    """One rollout of a fresh agent; returns (agent, envs, buffer, normaliser)."""
    envs = make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)
    first = envs.reset(seed=0)
    torch.manual_seed(0)
    agent = build_agent(
        config, envs.single_observation_space, envs.single_action_space, torch.device("cpu"), envs.layout
    )
    normalize = ObservationNormalizer(agent.obs_rms, 10.0)
    mask_dim = None if first.action_mask is None else first.action_mask.shape[-1]
    buf = RolloutBuffer.allocate(steps, envs, torch.device("cpu"), mask_dim)
    cursor = EnvCursor.at_reset(first, normalize, update=True)
    cursor, last_value = collect_rollout(agent.policy, envs, buf, cursor, normalize, None, SectionTimer())
    return agent, envs, buf, cursor, last_value


def test_rows_are_the_state_the_agents_observation_and_its_id():
    ippo = make_vec_env(relay_config().env, torch.device("cpu"))
    mappo_config = relay_config(**{"multi_agent.algorithm": "mappo"})
    mappo = make_vec_env(mappo_config.env, torch.device("cpu"), multi_agent=mappo_config.multi_agent)
    rows, state_rows = ippo.reset(seed=0).obs, mappo.reset(seed=0).obs
    assert ippo.num_envs == 6 and rows.shape == (6, 2 + 3)  # 2 copies x 3 agents; observation + one-hot id
    for copy in range(2):
        for i in range(3):
            row = rows[copy * 3 + i]
            assert row[:2].tolist() == [0.0, float(i)] and row[2:].tolist() == np.eye(3)[i].tolist()
    assert state_rows.shape == (6, 4 + 2 + 3) and mappo.layout.critic_only == 4 and mappo.layout.raw == 3
    torch.testing.assert_close(state_rows[:, 4:], rows)
    assert (state_rows[:, :4] == 0).all()  # Relay.state() at t=0: the step and the last actions
    step = mappo.step(torch.tensor([0, 1, 2] * 2))
    assert step.obs[:, :4].tolist() == [[1.0, 0.0, 1.0, 2.0]] * 6  # every row carries the global state()
    no_ids = relay_config(**{"multi_agent.agent_ids": False})
    assert make_vec_env(no_ids.env, torch.device("cpu"), multi_agent=no_ids.multi_agent).reset(seed=0).obs.shape == (
        6,
        2,
    )


def test_a_dead_agent_is_masked_until_its_team_resets():
    """agent_1 terminates at step 2 of 5: its rows 3-5 are no decisions (zero observation, reward
    0, no flags, masked), its step-2 row is a real terminal transition; after the team's last
    step every agent gets one reset row. The normaliser never sees a dead row."""
    config = relay_config(normalize_obs=True)
    agent, envs, buf, _, _ = rollout(config)
    valid, rewards = buf.valid[:, 1].tolist(), buf.rewards[:, 1]
    # rows 0-1 alive (row 1 terminates), 2-5 dead (its team's steps 3-5, then the reset row), 6-7 alive...
    assert valid[:8] == [True, True, False, False, False, False, True, True]
    assert buf.terminated[:, 1].tolist()[:8] == [False, True, False, False, False, False, False, True]
    assert (rewards[2:6] == 0).all() and not buf.truncated[2:6, 1].any()
    assert valid == buf.valid[:, 4].tolist()  # the second copy's agent_1
    others = buf.valid[:, 0].tolist()
    assert others[:8] == [True, True, True, True, True, False, True, True]  # only the team's reset row
    assert buf.truncated[4, 0] and not buf.terminated[4, 0]
    # Observation statistics: the 6 first rows, then each step's rows of agents that acted (a
    # finishing agent's final observation included, a dead agent's zero row not): 3+3+2+2+2+3 per
    # 6-step cycle of a copy.
    assert agent.obs_rms.count == pytest.approx(1e-4 + 6 + 2 * 2 * 15)
    envs.close()


def test_an_agent_that_joins_after_reset_first_decides_on_its_first_observation():
    """agent_2 is absent at reset and first acts at step 3 of 6: its rows before are no decisions
    (masked, out of the statistics), its step-3 row is its first decision, on the observation the
    env gave it, and the env gets its actions from step 3 on (Relay asserts it gets exactly its
    agents' actions); after the team's reset it waits again."""
    joining = json.dumps({"join_at": 3, "die_at": 99, "length": 6})
    _, envs, buf, _, _ = rollout(relay_config(env_kwargs=joining))
    late = buf.valid[:, 2].tolist()
    assert late == [False, False, True, True, True, True, False, False, False, True, True, True]
    assert buf.valid[:, 0].tolist() == [True] * 6 + [False] + [True] * 5  # the team's reset row only
    assert buf.valid[:, 5].tolist() == late  # the second copy's agent_2
    assert buf.obs[2, 2].tolist() == [2.0, 2.0, 0.0, 0.0, 1.0]  # [step, agent index | id]: what step 2 returned
    assert buf.rewards[2, 2] == float(buf.actions[2, 2] == 2)  # rewarded for its step-3 action
    relay = envs.envs[0]
    envs.reset(seed=0)
    for step, action in enumerate([1, 1, 2, 1], start=1):
        envs.step(torch.tensor([0, 0, action] * 2))
        assert relay.last[2] == (0.0 if step < 3 else action)  # the env took agent_2's action from step 3 on
    envs.close()
    # statistics: each step's rows of agents in play (or finishing): 2 at reset, 2, 3 (agent_2 joins), 3, 3, 3
    agent, envs, _, _, _ = rollout(relay_config(env_kwargs=joining, normalize_obs=True))
    assert agent.obs_rms.count == pytest.approx(1e-4 + 2 * (2 + 2 + 3 + 3 + 3 + 3 + 3 + 2 + 2 + 3 + 3 + 3 + 3))
    envs.close()


def test_mappo_critic_sees_the_global_state_and_the_actor_does_not():
    config = relay_config(**{"multi_agent.algorithm": "mappo"})
    envs = make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)
    rows = envs.step(torch.tensor([0, 1, 2] * 2)).obs
    agent = build_agent(
        config, envs.single_observation_space, envs.single_action_space, torch.device("cpu"), envs.layout
    )
    changed = rows.clone()
    changed[:, :4] += torch.randn(6, 4)  # another global state
    with torch.no_grad():
        params, value = agent.policy(rows)
        params2, value2 = agent.policy(changed)
    torch.testing.assert_close(params, params2, rtol=0, atol=0)
    assert (value - value2).abs().min() > 0
    # IPPO: no state columns, the critic reads what the actor reads.
    assert (
        relay_config().multi_agent.algorithm == "ippo"
        and make_vec_env(relay_config().env, torch.device("cpu")).layout.critic_only == 0
    )


def test_the_shared_policy_on_all_rows_equals_each_agent_alone_and_gae_runs_per_agent():
    agent, envs, buf, cursor, last_value = rollout(relay_config(), steps=12)
    flat = buf.flatten()
    with torch.no_grad():
        together = agent.policy.evaluate(flat["obs"], flat["actions"])
        for i in range(envs.num_envs):
            alone = agent.policy.evaluate(buf.obs[:, i], buf.actions[:, i])
            for x, y in zip(together, alone):
                torch.testing.assert_close(x.view(12, envs.num_envs)[:, i], y)
    advantages, returns = compute_gae(
        buf.rewards, buf.values, shift_values(buf.values, last_value), buf.terminated, buf.truncated, 0.99, 0.95
    )
    for i in range(envs.num_envs):  # one agent row's GAE, by the textbook backward loop on its column alone
        next_values = torch.cat([buf.values[1:, i], last_value[i : i + 1]])
        expected, running = torch.zeros(12), 0.0
        for t in reversed(range(12)):
            done = bool(buf.terminated[t, i] or buf.truncated[t, i])
            bootstrap = 0.0 if buf.terminated[t, i] else 0.99 * float(next_values[t])
            delta = float(buf.rewards[t, i]) + bootstrap - float(buf.values[t, i])
            running = delta + (0.0 if done else 0.99 * 0.95 * running)
            expected[t] = running
        valid = buf.valid[:, i]
        torch.testing.assert_close(advantages[:, i][valid], expected[valid], rtol=1e-5, atol=1e-5)
    envs.close()


def test_agents_with_different_spaces_need_padding_and_padded_actions_are_masked():
    kwargs = {"actions": [2, 3, 4], "obs_sizes": [2, 3, 2]}
    with pytest.raises(FastPPOError, match="--multi-agent.pad"):
        train(relay_config(env_kwargs=json.dumps(kwargs)))
    config = relay_config(env_kwargs=json.dumps(kwargs), **{"multi_agent.pad": True, "total_timesteps": 240})
    envs = make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)
    first = envs.reset(seed=0)
    assert first.obs.shape == (6, 3 + 3) and first.action_mask.shape == (6, 4)
    assert first.action_mask[:3].tolist() == [[True, True, False, False], [True, True, True, False], [True] * 4]
    agent = train(config)  # the Relay env asserts every action lies in its agent's own space
    assert agent.action_masks


def test_train_eval_record_export_and_per_agent_logging(tmp_path, capsys):
    run = tmp_path / "run"
    common = ["--num-envs", "2", "--num-steps", "12", "--total-timesteps", "96", "--no-progress", "--no-tensorboard"]
    assert (
        main(["train", RELAY, *common, "--multi-agent.algorithm", "mappo", "--normalize-obs", "--run-dir", str(run)])
        == 0
    )
    record = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert {f"charts/agent_return/agent_{i}" for i in range(3)} <= record.keys()
    # The team return is the sum of the agents' returns.
    assert record["charts/episodic_return"] == pytest.approx(
        sum(record[f"charts/agent_return/agent_{i}"] for i in range(3))
    )
    assert (
        main(["eval", str(run), "--episodes", "3", "--seed", "0", "--env-id", RELAY]) == 0
    )  # a test module: user code
    assert "length 5.0" in capsys.readouterr().out
    assert main(["record", str(run), "--out", str(tmp_path / "relay.mp4"), "--env-id", RELAY]) == 0
    assert (tmp_path / "relay.mp4").stat().st_size > 0
    onnxruntime = pytest.importorskip("onnxruntime")
    assert main(["export", str(run), "--onnx", str(tmp_path / "relay.onnx")]) == 0
    agent = fastppo.load(run)
    envs = make_vec_env(agent.config.env, torch.device("cpu"), multi_agent=agent.config.multi_agent)
    rows = envs.step(torch.tensor([0, 1, 2] * 2)).obs.numpy()
    session = onnxruntime.InferenceSession(str(tmp_path / "relay.onnx"))
    exported = session.run(["action"], {"obs": rows[:, agent.layout.critic_only :]})[0]  # the actor's columns only
    assert exported.tolist() == agent.act(rows, deterministic=True).tolist()


def test_a_sisl_task_with_continuous_actions_trains_and_evaluates(tmp_path, capsys):
    """multiwalker (3 walkers, Box actions, the team ends when one falls): the team and per-walker
    returns are logged and the saved run evaluates."""
    pytest.importorskip("pettingzoo.sisl")
    run = tmp_path / "walkers"
    argv = [
        "train",
        "pz:pettingzoo.sisl.multiwalker_v9",
        "--env-kwargs",
        '{"max_cycles": 60}',
        "--num-envs",
        "2",
        "--num-steps",
        "64",
        "--total-timesteps",
        "256",
    ]
    assert main([*argv, "--no-progress", "--no-tensorboard", "--run-dir", str(run)]) == 0
    record = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    returns = [record[f"charts/agent_return/walker_{i}"] for i in range(3)]
    assert record["charts/episodic_return"] == pytest.approx(sum(returns))
    assert main(["eval", str(run), "--episodes", "2", "--seed", "0"]) == 0
    assert "over 2 episodes" in capsys.readouterr().out


def test_a_recurrent_shared_policy_trains_and_evaluates():
    config = relay_config(**{"policy.memory": "gru", "policy.memory_size": 8, "multi_agent.algorithm": "mappo"})
    agent = train(config)
    assert agent.policy.recurrent and fastppo.evaluate(agent, episodes=2, seed=0).mean_length == 5.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "tensor"], "PettingZoo envs step on the sync backend (the trainer's process) or async"),
        (["--env-kwargs", "{die_at: 3}"], "expects a JSON object"),
        (
            ["--env-kwargs", '{"bogus": 1}'],
            "pz:tests.support.fake_pz_envs rejected --env-kwargs {'bogus': 1}: Relay.__init__() got an "
            "unexpected keyword argument 'bogus'",
        ),
        (["--multi-agent.algorithm", "mappo", "--policy.shared-trunk"], "drop --policy.shared-trunk"),
    ],
)
def test_bad_multi_agent_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(["train", RELAY, "--total-timesteps", "1024", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("pz:mpe2.no_such_env_v0", "cannot import the PettingZoo module"),
        ("pz:", "pz: names no module"),
        ("pz:.relative", "names no module"),
        (
            "pz:pettingzoo.sisl.pursuit_v4",
            "cannot build pz:pettingzoo.sisl.pursuit_v4: pursuit_v4 is now deprecated, use pursuit_v5 instead",
        ),
        (
            "pz:tests.support.fake_pz_envs:no_such_function",
            "tests.support.fake_pz_envs defines no 'no_such_function': name a function that returns a "
            "PettingZoo ParallelEnv",
        ),
        ("pz:tests.support.fake_pz_envs:AGENTS", "defines 'AGENTS' as a tuple"),
        (
            "pz:tests.support.fake_pz_envs:image_relay",
            "agent agent_0 observes images ((8, 8, 3) uint8), and fastppo's multi-agent rows are flat vectors",
        ),
    ],
)
def test_an_env_fastppo_cannot_train_is_one_line_saying_why(env_id, message, capsys):
    assert main(["train", env_id]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_missing_dependency_of_a_pettingzoo_env_names_it_and_its_extra(capsys, monkeypatch):
    """chess_v6 needs python-chess, which [games] installs: here it is made missing."""
    for name in [m for m in sys.modules if m.startswith("pettingzoo.classic.chess")]:
        monkeypatch.delitem(sys.modules, name)  # built before: it would not import chess again
    monkeypatch.setitem(sys.modules, "chess", None)  # `import chess` raises ModuleNotFoundError
    assert main(["train", "pz:pettingzoo.classic.chess_v6"]) == 2
    assert capsys.readouterr().err == (
        "fastppo: error: pz:pettingzoo.classic.chess_v6 needs the module 'chess', which is not installed: pip "
        'install -e ".[games]" in the fastppo repository\n'
    )


@pytest.mark.parametrize(
    ("env_id", "package", "extra"),
    [("pz:pettingzoo.classic.tictactoe_v3", "pettingzoo", "games"), ("pz:mpe2.simple_spread_v3", "mpe2", "multiagent")],
)
def test_a_missing_pettingzoo_names_the_extra_of_its_envs_family(env_id, package, extra, capsys, monkeypatch):
    """A game needs [games] (its pool's ratings need openskill, its opponents OpenSpiel), an MPE
    task [multiagent]; installed from the repository, as fastppo is (``pip install 'fastppo[...]'``
    finds nothing outside a clone)."""

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] == package:
                raise ModuleNotFoundError(f"No module named '{package}'", name=package)

    for name in [m for m in sys.modules if m.split(".")[0] == package]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [NotInstalled(), *sys.meta_path])
    assert main(["train", env_id]) == 2
    err = capsys.readouterr().err
    assert err.endswith(f'(pip install -e ".[{extra}]" in the fastppo repository)\n') and len(err.splitlines()) == 1, (
        err
    )


@pytest.mark.parametrize(
    ("env_kwargs", "message"),
    [
        (
            '{"max_cycles": "abc"}',
            "--env-kwargs {'max_cycles': 'abc'}: max_cycles of pz:mpe2.simple_spread_v3 is a number (its default "
            "is 25), not 'abc': give a number",
        ),
        (
            '{"continuous_actions": "yes"}',
            "continuous_actions of pz:mpe2.simple_spread_v3 is a bool (its default is False), not 'yes'",
        ),
        ('{"N": 0}', "pz:mpe2.simple_spread_v3 rejected --env-kwargs {'N': 0}: "),
    ],
)
def test_a_bad_env_kwarg_value_is_one_line_naming_it(env_kwargs, message, capsys, tmp_path):
    """Caught before the env takes a value of the wrong kind in (it would fail steps later, deep in
    its code), or when its constructor refuses one."""
    assert (
        main(
            [
                "train",
                "pz:mpe2.simple_spread_v3",
                "--env-kwargs",
                env_kwargs,
                "--run-dir",
                str(tmp_path / "run"),
                "--total-timesteps",
                "256",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_the_batch_counts_a_row_per_agent(tmp_path, capsys):
    """1 copy x 5 steps x 3 agents = 15 rows: 3 minibatches of 5 rows train (5 env steps do not
    split in 3); 4 minibatches do not split the 15 rows, and the message counts them."""
    tiny = [
        "--num-envs",
        "1",
        "--num-steps",
        "5",
        "--update-epochs",
        "1",
        "--total-timesteps",
        "10",
        "--no-tensorboard",
        "--no-progress",
    ]
    assert main(["train", RELAY, *tiny, "--num-minibatches", "3", "--run-dir", str(tmp_path / "three")]) == 0
    assert main(["train", RELAY, *tiny, "--num-minibatches", "4", "--run-dir", str(tmp_path / "four")]) == 2
    assert capsys.readouterr().err.endswith(
        "fastppo: error: batch size 15 (num_envs 1 x num_steps 5 x 3 agents) does not split into 4 "
        "minibatches: pick num_minibatches dividing 15\n"
    )
    assert not (tmp_path / "four").exists()
    assert (
        main(
            [
                "train",
                RELAY,
                *tiny,
                "--num-minibatches",
                "5",
                "--policy.memory",
                "gru",
                "--run-dir",
                str(tmp_path / "gru"),
            ]
        )
        == 2
    )  # 15 rows, but 3 sequences
    assert "--num-minibatches 5 exceeds --num-envs 1 x 3 agents; pick at most 3" in capsys.readouterr().err


def test_a_nan_from_a_pettingzoo_env_names_the_agent_and_its_copy():
    """Rows are copy-major (row copy * agents + i): row 4 of 2 copies x 3 agents is agent_1 of copy 1."""
    buf = SimpleNamespace(obs=torch.zeros(4, 6, 5), rewards=torch.zeros(4, 6), first_row=0)
    buf.rewards[2, 4] = float("nan")
    with pytest.raises(FastPPOError) as raised:
        check_finite_rollout(
            buf,
            SimpleNamespace(obs=torch.zeros(6, 5)),
            iteration=3,
            global_step=100,
            agents=["agent_0", "agent_1", "agent_2"],
        )
    assert str(raised.value) == (
        "training stopped at iteration 3: the env returned a NaN/Inf reward for agent agent_1 of copy 1 at "
        "rollout step 2 (about global step 104); fix the env"
    )


def test_train_help_names_pettingzoo_envs(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert (
        "pz:<module> (its parallel_env(), e.g. pz:mpe2.simple_spread_v3) or pz:<module or file.py>:<function> "
        "returning one"
    ) in help_text


def test_a_function_returning_a_parallel_env_trains_and_its_folder_names_it(tmp_path):
    """pz:<module>:<function> and pz:<file.py>:<function> (saved with the file's absolute path)."""
    for i, env_id in enumerate(
        ("pz:tests.support.fake_pz_envs:parallel_env", "pz:tests/support/fake_pz_envs.py:parallel_env")
    ):
        agent = fastppo.train(env_id, run_dir=tmp_path / str(i), **TINY, env_kwargs=json.dumps({"length": 4}))
        assert agent.config.env.env_id == env_id.replace("tests/", f"{Path.cwd()}/tests/")
        assert fastppo.evaluate(agent, episodes=2, seed=0).mean_length == 4.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--env-kwargs", '{"max_cycles": 25}'], "--env-kwargs applies to PettingZoo envs (pz:<module>) only"),
        (["--multi-agent.algorithm", "mappo"], "--multi-agent.* flags apply to PettingZoo envs (pz:<module>) only"),
        (["--multi-agent.pad"], "--multi-agent.* flags apply to PettingZoo envs (pz:<module>) only"),
    ],
)
def test_multi_agent_flags_on_a_gymnasium_env_are_one_line_errors_not_ignored(argv, message, capsys):
    assert main(["train", "CartPole-v1", "--total-timesteps", "1024", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


GROUPED = {"env_kwargs": json.dumps({"agents": ["adversary_0", "agent_0", "agent_1"]}), "multi_agent.policies": "group"}


def test_one_policy_per_agent_group_acts_and_learns_on_its_own_rows():
    """adversary_0 | agent_0, agent_1: two networks; every row is scored by its group's network
    alone, and training moves each group's weights by its own rows only."""
    config = relay_config(**GROUPED, total_timesteps=240)
    envs = make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)
    assert envs.layout.groups == (0, 1, 1)
    rows = envs.reset(seed=0).obs
    torch.manual_seed(0)
    agent = build_agent(
        config, envs.single_observation_space, envs.single_action_space, torch.device("cpu"), envs.layout
    )
    actions = torch.tensor([0, 1, 2] * 2)
    with torch.no_grad():
        logprob, entropy, value = agent.policy.evaluate(rows, actions)
        for row in range(6):
            own = agent.policy.policies[(0, 1, 1)[row % 3]]
            expected = own.evaluate(rows[row : row + 1], actions[row : row + 1])
            torch.testing.assert_close(torch.stack([logprob[row], entropy[row], value[row]]), torch.cat(expected))
    before = [torch.cat([p.detach().flatten() for p in policy.parameters()]) for policy in agent.policy.policies]
    trained = train(config)
    after = [torch.cat([p.detach().flatten() for p in policy.parameters()]) for policy in trained.policy.policies]
    assert all((a - b).abs().max() > 0 for a, b in zip(after, before))  # both groups learn (same seed: same init)
    assert (after[0] - after[1]).abs().max() > 0
    assert fastppo.evaluate(trained, episodes=2, seed=0).mean_length == 5.0


def test_group_policies_need_agent_ids(capsys):
    assert (
        main(
            [
                "train",
                RELAY,
                "--total-timesteps",
                "1024",
                "--multi-agent.policies",
                "group",
                "--multi-agent.no-agent-ids",
            ]
        )
        == 2
    )
    assert "reads each row's policy from its agent id" in capsys.readouterr().err


@pytest.mark.parametrize("algorithm", ["ippo", "mappo"])
@pytest.mark.parametrize(
    "env_id, env_kwargs",
    [(RELAY, {}), (RELAY, {"join_at": 3}), ("pz:mpe2.simple_spread_v3", {"max_cycles": 25})],
    ids=["relay", "relay-joining", "simple-spread"],
)
def test_stop_and_resume_equals_one_go(tmp_path, monkeypatch, env_id, env_kwargs, algorithm):
    """As tests/training/test_resume.py's: the stop after 21 of 42 steps falls mid-episode (Relay: agent_1
    dead, its rows masked; MPE: moving entities, and an episode end ahead that resets from the
    env's np_random), so the resumed envs must go on from the snapshot, not from fresh episodes."""
    overrides = TINY | {
        "num_steps": 7,
        "total_timesteps": ITERATIONS * 2 * 7,
        "checkpoint_every": 0,
        "normalize_obs": True,
    }
    overrides |= {"env_kwargs": json.dumps(env_kwargs), "multi_agent.algorithm": algorithm}
    train(fastppo.make_config(env_id, "cleanrl-discrete", overrides), tmp_path / "one_go")

    with monkeypatch.context() as patch:
        stop_after(patch, ITERATIONS // 2)
        train(fastppo.make_config(env_id, "cleanrl-discrete", overrides), tmp_path / "split")
    resumed_config, checkpoint = resume_config(tmp_path / "split", env_id=env_id)  # Relay is a test module: user code
    assert checkpoint.meta["env"]["kind"] == "pettingzoo"
    train(resumed_config, tmp_path / "split", checkpoint)
    assert_same_run(tmp_path / "one_go", tmp_path / "split")


@pytest.mark.parametrize("module", sorted(name.removeprefix("mpe/") for name in mpe2.all_modules.mpe_environments))
def test_every_mpe_env_continues_identically_from_a_snapshot(module):
    """Snapshot mid-episode with an episode pending, step on, restore into fresh envs reset from
    another seed: the same rows, rewards, flags and episodes. The fresh simple_adversary's agents
    point at another goal landmark than the snapshot's: the snapshot's sharing must come back."""
    config = fastppo.make_config(
        f"pz:mpe2.{module}",
        "cleanrl-discrete",
        {"num_envs": 3, "env_kwargs": json.dumps({"max_cycles": 7}), "multi_agent.pad": True},
    )
    a, b = (make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent) for _ in range(2))
    allowed = (
        torch.ones(len(a.agents), a.single_action_space.n)
        if a.spaces.padding_mask is None
        else torch.as_tensor(a.spaces.padding_mask, dtype=torch.float32)
    )
    generator = torch.Generator().manual_seed(0)
    actions = [torch.multinomial(allowed.repeat(3, 1), 1, generator=generator).squeeze(1) for _ in range(40)]
    a.reset(seed=3)
    for action in actions[:11]:  # 7 steps and a reset row, then 3 steps into the second episode
        a.step(action)
    tensors, meta = snapshot_envs(a)
    b.reset(seed=99)
    restore_envs(b, tensors, json.loads(json.dumps(meta)))  # through JSON, as on disk
    for action in actions[11:]:
        for x, y in zip(a.step(action), b.step(action)):
            assert (x is None and y is None) or torch.equal(x, y)
    episodes = a.pop_episodes()
    assert len(episodes.lengths) == 5 * 3 and episodes == b.pop_episodes()  # the 3 pending at the snapshot included


def test_a_pettingzoo_id_finds_the_preset_named_after_its_module():
    from fastppo.config import preset_for_env

    assert preset_for_env("pz:mpe2.simple_spread_v3", continuous=False) == "simple_spread_v3"
    assert preset_for_env("pz:pettingzoo.mpe.simple_spread_v3", continuous=False) == "simple_spread_v3"
    assert preset_for_env(RELAY, continuous=False) == "cleanrl-discrete"  # no preset for fake_pz_envs
    assert (
        preset_for_env("mpe2.simple_spread_v3", continuous=False) == "cleanrl-discrete"
    )  # only pz: ids are read as modules
    pytest.importorskip("mpe2")
    config = fastppo.make_config("pz:mpe2.simple_spread_v3")
    assert config.env.env_kwargs == {"max_cycles": 25, "continuous_actions": False}
    assert config.multi_agent.algorithm == "mappo" and config.env.normalize_obs


def random_team_return(module: str, episodes: int, seed: int = 0) -> float:
    """Mean team return of uniformly random actions (every agent from its own action space)."""
    import importlib

    env = importlib.import_module(module).parallel_env(max_cycles=25)
    returns = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        for agent in env.possible_agents:
            env.action_space(agent).seed(seed + episode)
        team = 0.0
        while env.agents:
            _, rewards, _, _, _ = env.step({agent: env.action_space(agent).sample() for agent in env.agents})
            team += sum(rewards.values())
        returns.append(team)
    return float(np.mean(returns))


@pytest.mark.slow
def test_the_simple_spread_preset_beats_a_random_team_by_a_clear_margin():
    """MAPPO with the simple_spread_v3 preset, 60k env steps, seed 1: the last 64 episodes' team
    return beats a random team's (200 episodes) by at least 10. Measured: -64.1 against -84.7, a
    margin of 20.6 (the mean over 64 episodes moved between -60 and -74 after 20k steps). Took
    190-200 s on 2 shared AMD EPYC cores under a load average of ~6 (2026-11-23).
    benchmarks/multi_agent.py has the 3-seed figures."""
    pytest.importorskip("mpe2")
    random = random_team_return("mpe2.simple_spread_v3", episodes=200)
    agent = fastppo.train("pz:mpe2.simple_spread_v3", seed=1, total_timesteps=60_000, progress=False, tensorboard=False)
    learned = float(np.mean(agent.episode_returns[-64:]))
    assert learned >= random + 10, (learned, random)


@pytest.mark.parametrize("module", ["mpe2.simple_spread_v3", "mpe2.simple_speaker_listener_v4"])
def test_mappo_builds_an_mpe_state_from_the_observations_and_it_equals_the_envs_state(module):
    pytest.importorskip("mpe2")
    overrides = {
        "num_envs": 2,
        "env_kwargs": {"max_cycles": 4},
        "multi_agent.algorithm": "mappo",
        "multi_agent.pad": True,
    }
    config = fastppo.make_config(f"pz:{module}", "cleanrl-discrete", overrides)
    envs = make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)
    assert envs.spaces.state_from_observations  # state() is not called on the hot path
    n, size = len(envs.agents), envs.spaces.state_size
    rows = envs.reset(seed=0).obs
    torch.manual_seed(0)
    for _ in range(12):  # 2-3 episodes per copy: first, final and reset rows all checked
        for c, env in enumerate(envs.envs):
            expected = torch.from_numpy(np.asarray(env.state(), dtype=np.float32)).expand(n, size)
            assert torch.equal(rows[c * n : (c + 1) * n, :size], expected)
        rows = envs.step(torch.randint(0, 3, (envs.num_envs,))).obs
    assert envs.pop_episodes().lengths  # episodes ended on the way


def test_the_mpe_shortcuts_are_kept_to_mpe_envs_as_their_modules_build_them():
    from fastppo.envs.mpe import simple_env, state_is_observations
    from fastppo.envs.pettingzoo_vec import make_parallel_env

    assert simple_env(make_parallel_env(RELAY, {})) is None and not state_is_observations(make_parallel_env(RELAY, {}))
    mpe = pytest.importorskip("mpe2.simple_spread_v3")
    assert state_is_observations(mpe.parallel_env())
    assert (
        simple_env(mpe.parallel_env()) is not None and simple_env(mpe.parallel_env(continuous_actions=True)) is not None
    )
    from pettingzoo.utils.conversions import aec_to_parallel
    from pettingzoo.utils.wrappers import BaseWrapper

    class Scaled(BaseWrapper):  # a wrapper that changes what observe() returns
        def observe(self, agent):
            return 2 * super().observe(agent)

    assert simple_env(aec_to_parallel(Scaled(mpe.env()))) is None and not state_is_observations(
        aec_to_parallel(Scaled(mpe.env()))
    )
    assert make_vec_env(fastppo.make_config("pz:mpe2.simple_spread_v3").env, torch.device("cpu"))._direct == [True] * 8
    assert make_vec_env(relay_config().env, torch.device("cpu"))._direct == [False] * 2


def aec_state(env):
    """What a parallel step leaves in an mpe2 env for the next: the AEC bookkeeping of its
    SimpleEnv, the order wrapper's flags and the parallel wrapper's agents."""
    inner = env.unwrapped
    names = (
        "agents",
        "agent_selection",
        "_skip_agent_selection",
        "rewards",
        "_cumulative_rewards",
        "terminations",
        "truncations",
        "infos",
        "steps",
        "current_actions",
    )
    state = {name: getattr(inner, name, None) for name in names} | {
        "selector": vars(inner._agent_selector),
        "parallel": env.agents,
    }
    return repr(state | {"order": (env.aec_env._has_reset, env.aec_env._has_updated)})


@pytest.mark.parametrize(
    "module, env_kwargs",
    [(name.removeprefix("mpe/"), {}) for name in sorted(mpe2.all_modules.mpe_environments)]
    + [
        ("simple_spread_v3", {"continuous_actions": True}),
        ("simple_speaker_listener_v4", {"continuous_actions": True}),
        ("simple_spread_v3", {"terminal": True}),
    ],
    ids=lambda value: "-".join(value) or "discrete" if isinstance(value, dict) else value,
)
def test_the_direct_mpe_step_equals_pettingzoos_parallel_step(module, env_kwargs):
    """Step by step over three episodes (seeded and unseeded resets, the 25-step truncation;
    continuous actions out of bounds, clipped; a world that ends early): the same observations,
    rewards (types and signs of zero included), flags, infos and env state as ``env.step``."""
    from fastppo.envs.mpe import parallel_step

    kwargs = dict(env_kwargs)
    terminal = kwargs.pop("terminal", False)
    direct, generic = (importlib.import_module(f"mpe2.{module}").parallel_env(**kwargs) for _ in range(2))
    if terminal:  # ends at step 9 of each episode, before the time limit
        for env in (direct, generic):
            env.unwrapped.scenario.is_terminal = lambda world, inner=env.unwrapped: inner.steps == 9
    rng = np.random.default_rng(0)
    ended = []
    for seed in [5, None, 6]:
        results = [env.reset(seed=seed) for env in (direct, generic)]
        while generic.agents:
            assert direct.agents == generic.agents
            actions = {agent: sample(rng, generic.action_space(agent)) for agent in generic.agents}
            results = [parallel_step(direct, actions), generic.step(actions)]
            (observations, *rest), (expected, *expected_rest) = results
            assert observations.keys() == expected.keys()
            for agent, observation in observations.items():
                assert observation.dtype == expected[agent].dtype and np.array_equal(observation, expected[agent])
            assert repr([dict(r) for r in rest]) == repr([dict(r) for r in expected_rest])
            assert aec_state(direct) == aec_state(generic)
        ended.append(generic.unwrapped.steps)
    assert ended == ([9] * 3 if terminal else [25] * 3)


def world_state(env):
    """Every entity's position and velocity, every agent's message (exact bytes) and the AEC
    state of one mpe2 copy."""
    world = env.unwrapped.world
    messages = [a.state.c.tobytes() for a in world.agents]
    return (
        [(e.state.p_pos.tobytes(), e.state.p_vel.tobytes()) for e in world.agents + world.landmarks],
        messages,
        aec_state(env),
    )


def touching(env):
    """Whether two agents of an mpe2 copy overlap (and so push each other and count a collision)."""
    agents = env.unwrapped.world.agents
    return any(
        np.linalg.norm(a.state.p_pos - b.state.p_pos) < a.size + b.size
        for i, a in enumerate(agents)
        for b in agents[i + 1 :]
    )


@pytest.mark.parametrize("algorithm", ["ippo", "mappo"])
@pytest.mark.parametrize(
    "task, env_kwargs",
    [
        ("simple_spread_v3", {"max_cycles": 25}),
        ("simple_spread_v3", {"N": 4, "local_ratio": 0.25, "max_cycles": 9}),
        ("simple_spread_v3", {"curriculum": True, "max_cycles": 9}),
        ("simple_speaker_listener_v4", {"max_cycles": 9}),
    ],
    ids=["spread", "spread-N4-local0.25", "spread-curriculum-stage0", "speaker-listener"],
)
def test_mpe_copies_stepped_at_once_equal_their_own_steps(task, env_kwargs, algorithm):
    """fastppo.envs.mpe.BatchedWorlds against each copy's own mpe2 step, through the agent rows,
    over several episodes of 6 copies (random actions: spread's agents collide now and then; the
    speaker's 3 actions padded to the listener's 5; one copy out of step with the others, so that
    some steps batch 5 copies while the sixth ends or resets): the same rows, rewards, flags, live rows,
    action masks and episodes at every step, and the same positions, velocities, messages and
    AEC bookkeeping left in every copy."""
    overrides = {
        "num_envs": 6,
        "env_kwargs": json.dumps(env_kwargs),
        "multi_agent.algorithm": algorithm,
        "multi_agent.pad": True,
    }
    config = fastppo.make_config(f"pz:mpe2.{task}", None, overrides)
    batched, own = (make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent) for _ in range(2))
    assert batched._batched is not None
    own._batched = None
    allowed = (
        torch.ones(len(own.agents), own.single_action_space.n)
        if own.spaces.padding_mask is None
        else torch.as_tensor(own.spaces.padding_mask, dtype=torch.float32)
    )
    generator = torch.Generator().manual_seed(0)
    collisions, stepped, mixed = 0, 0, False
    for env in (batched, own):
        env.reset(seed=4)
        env.envs[0].unwrapped.steps = 3  # copy 0 ends its episodes 3 steps before the others: mixed steps
    for _ in range(3 * (env_kwargs["max_cycles"] + 1)):
        action = torch.multinomial(allowed.repeat(6, 1), 1, generator=generator).squeeze(1)
        at_once = len(batched._batched_copies(action.numpy().reshape(6, -1)))
        stepped, mixed = stepped + at_once, mixed or 0 < at_once < 6
        for x, y in zip(batched.step(action), own.step(action)):
            assert (x is None and y is None) or torch.equal(x, y)
        for x, y in zip(batched.envs, own.envs):
            assert world_state(x) == world_state(y)
        collisions += sum(touching(env) for env in own.envs)
    assert stepped >= 6 * 3 * (env_kwargs["max_cycles"] - 3) and mixed
    assert collisions > 0 or task != "simple_spread_v3"
    assert batched.pop_episodes() == own.pop_episodes()


def test_mpe_copies_step_at_once_only_as_their_modules_build_them_with_discrete_actions():
    from fastppo.envs.mpe import batched_env

    spread = pytest.importorskip("mpe2.simple_spread_v3")
    speaker_listener = importlib.import_module("mpe2.simple_speaker_listener_v4")
    assert batched_env(spread.parallel_env()) is not None and batched_env(speaker_listener.parallel_env()) is not None
    for kwargs in (
        {"continuous_actions": True},
        {"terminate_on_success": True},
        {"num_agent_neighbors": 1},
        {"benchmark_data": True},
    ):
        assert batched_env(spread.parallel_env(**kwargs)) is None, kwargs
    assert batched_env(speaker_listener.parallel_env(continuous_actions=True)) is None
    assert batched_env(importlib.import_module("mpe2.simple_tag_v3").parallel_env()) is None
    for attribute, value in (("u_noise", 0.1), ("max_speed", 1.0), ("silent", False)):
        changed = spread.parallel_env()
        setattr(changed.unwrapped.world.agents[0], attribute, value)
        assert batched_env(changed) is None, attribute
    assert make_vec_env(relay_config().env, torch.device("cpu"))._batched is None


def sample(rng, space):
    """A random action: any of a Discrete space's, or one of a Box's up to half its width out of bounds."""
    if isinstance(space, gymnasium.spaces.Discrete):
        return rng.integers(space.n)
    return rng.uniform(space.low - 0.5, space.high + 0.5).astype(space.dtype)


def test_training_on_mpe_is_bit_identical_with_the_direct_step(tmp_path, monkeypatch):
    """Same seed, with and without fastppo.envs.mpe's shortcuts (parallel_step, BatchedWorlds):
    the same metrics and weights."""
    import fastppo.envs.mpe

    overrides = {
        "seed": 3,
        "total_timesteps": 1600,
        "progress": False,
        "tensorboard": False,
        "multi_agent.algorithm": "ippo",
    }
    direct = fastppo.train("pz:mpe2.simple_spread_v3", run_dir=tmp_path / "direct", **overrides)
    monkeypatch.setattr(fastppo.envs.mpe, "parallel_step", lambda env, actions: env.step(actions))
    monkeypatch.setattr(fastppo.envs.mpe, "batched_env", lambda env: None)
    generic = fastppo.train("pz:mpe2.simple_spread_v3", run_dir=tmp_path / "generic", **overrides)
    for name, value in direct.policy.state_dict().items():
        assert torch.equal(value, generic.policy.state_dict()[name]), name

    def untimed(path):
        return [
            {k: v for k, v in json.loads(line).items() if "time" not in k and "SPS" not in k}
            for line in open(path / "metrics.jsonl")
        ]

    assert untimed(tmp_path / "direct") == untimed(tmp_path / "generic")
