"""Config defaults, presets and overrides."""

from __future__ import annotations

import pytest

from fastppo.config import Config, apply_overrides, available_presets, load_preset, preset_for_env
from fastppo.errors import FastPPOError


def test_defaults_are_cleanrl_ppo_py():
    c = Config()
    assert (c.ppo.total_timesteps, c.ppo.learning_rate, c.env.num_envs, c.ppo.num_steps) == (500_000, 2.5e-4, 4, 128)
    assert (c.ppo.gamma, c.ppo.gae_lambda, c.ppo.num_minibatches, c.ppo.update_epochs) == (0.99, 0.95, 4, 4)
    assert (c.ppo.clip_coef, c.ppo.ent_coef, c.ppo.vf_coef, c.ppo.max_grad_norm) == (0.2, 0.01, 0.5, 0.5)
    assert c.ppo.lr_schedule == "linear" and c.ppo.norm_adv and c.ppo.clip_vloss and c.ppo.target_kl is None
    assert c.policy.hidden_sizes == (64, 64) and c.policy.activation == "tanh"
    assert (c.batch_size, c.minibatch_size, c.num_iterations) == (512, 128, 976)


def test_continuous_preset_is_cleanrl_ppo_continuous_action():
    c = apply_overrides(Config(), load_preset("cleanrl-continuous"))
    assert (c.env.num_envs, c.ppo.num_steps, c.ppo.num_minibatches, c.ppo.update_epochs) == (1, 2048, 32, 10)
    assert (c.ppo.learning_rate, c.ppo.ent_coef, c.ppo.total_timesteps) == (3e-4, 0.0, 1_000_000)
    assert c.env.normalize_obs and c.env.normalize_reward


@pytest.mark.parametrize("name", available_presets())
def test_every_shipped_preset_loads_and_validates(name):
    apply_overrides(Config(), load_preset(name)).validate()


def test_preset_chosen_by_env_id():
    assert preset_for_env("CartPole-v1", continuous=False) == "CartPole-v1"
    assert preset_for_env("MountainCarContinuous-v0", continuous=True) == "cleanrl-continuous"
    assert preset_for_env("tests.fake_envs:MaskedChoiceEnv", continuous=False) == "cleanrl-discrete"


def test_overrides_accept_dotted_and_bare_names_and_coerce_types():
    c = apply_overrides(Config(), {"ppo.learning-rate": "1e-3", "num_envs": "8", "target_kl": "none", "hidden_sizes": "32,16", "norm_adv": "false"})
    assert (c.ppo.learning_rate, c.env.num_envs, c.ppo.target_kl, c.policy.hidden_sizes, c.ppo.norm_adv) == (1e-3, 8, None, (32, 16), False)
    c = apply_overrides(Config(), {"total_timesteps": "1_000_000", "target_kl": 0.02})
    assert c.ppo.total_timesteps == 1_000_000 and c.ppo.target_kl == 0.02


def test_round_trip_through_dict():
    c = apply_overrides(Config(), {"hidden_sizes": "128,128", "seed": 9, "objective": "kl"})
    assert Config.from_dict(c.to_dict()) == c


def test_unknown_key_is_named():
    with pytest.raises(FastPPOError, match="unknown hyperparameter 'lerning_rate'"):
        apply_overrides(Config(), {"lerning_rate": 1})


def test_infinite_clips_and_extreme_seeds_stay_valid():
    # clip_coef inf is the unclipped surrogate, clip_obs/clip_reward inf no clipping; seeds use numpy's whole range.
    for overrides in ({"clip_coef": "inf", "clip_schedule": "constant"}, {"clip_obs": "inf", "clip_reward": "inf"}, {"seed": 0}, {"seed": 2**32 - 1}):
        apply_overrides(Config(), overrides).validate()


def test_torch_threads_default_to_one_for_a_run_and_every_cpu_for_a_stack(monkeypatch):
    import fastppo.config as config_module

    monkeypatch.setattr(config_module, "available_cpus", lambda: 6)
    automatic = Config()
    assert automatic.run.torch_threads == 0
    assert automatic.intra_op_threads(stacked=False) == 1 and automatic.intra_op_threads(stacked=True) == 6
    chosen = apply_overrides(Config(), {"torch_threads": 3})
    assert chosen.intra_op_threads(stacked=False) == 3 and chosen.intra_op_threads(stacked=True) == 3
    with pytest.raises(FastPPOError, match="--run.torch-threads must be 0 \\(automatic\\) or a positive integer, got -1"):
        apply_overrides(Config(), {"torch_threads": -1}).validate()
