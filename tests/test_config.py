"""Config defaults, presets and overrides."""

from __future__ import annotations

import pytest

from fastppo.config import Config, apply_overrides, available_presets, load_preset, preset_for_env
from fastppo.devices import resolve_device
from fastppo.envs.env_config import make_config
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
    overrides = load_preset(name)
    if any(key.startswith("self_play.") for key in overrides):  # a game's preset: its --self-play.* need its game
        overrides = {"env.env_id": f"pz:pettingzoo.classic.{name}", **overrides}
    apply_overrides(Config(), overrides).validate()


def test_preset_chosen_by_env_id():
    assert preset_for_env("CartPole-v1", continuous=False) == "CartPole-v1"
    assert preset_for_env("MountainCarContinuous-v0", continuous=True) == "cleanrl-continuous"
    assert preset_for_env("tests.support.fake_envs:MaskedChoiceEnv", continuous=False) == "cleanrl-discrete"


def test_overrides_accept_dotted_and_bare_names_and_coerce_types():
    c = apply_overrides(
        Config(),
        {
            "ppo.learning-rate": "1e-3",
            "num_envs": "8",
            "target_kl": "none",
            "hidden_sizes": "32,16",
            "norm_adv": "false",
        },
    )
    assert (c.ppo.learning_rate, c.env.num_envs, c.ppo.target_kl, c.policy.hidden_sizes, c.ppo.norm_adv) == (
        1e-3,
        8,
        None,
        (32, 16),
        False,
    )
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
    for overrides in (
        {"clip_coef": "inf", "clip_schedule": "constant"},
        {"clip_obs": "inf", "clip_reward": "inf"},
        {"seed": 0},
        {"seed": 2**32 - 1},
    ):
        apply_overrides(Config(), overrides).validate()


def test_torch_threads_default_to_one_for_an_mlp_run_and_every_cpu_for_a_cnn_or_a_stack(monkeypatch):
    import fastppo.config as config_module

    monkeypatch.setattr(config_module, "available_cpus", lambda: 6)
    automatic = Config()
    assert automatic.run.torch_threads == 0
    assert automatic.intra_op_threads(stacked=False) == 1 and automatic.intra_op_threads(stacked=True) == 6
    chosen = apply_overrides(Config(), {"torch_threads": 3})
    assert chosen.intra_op_threads(stacked=False) == 3 and chosen.intra_op_threads(stacked=True) == 3
    pixels = [
        apply_overrides(Config(), {"env_id": "BreakoutNoFrameskip-v4"}),
        apply_overrides(Config(), {"encoder": "cnn"}),
    ]
    assert [config.intra_op_threads(stacked=False) for config in pixels] == [6, 6]
    assert (
        apply_overrides(Config(), {"env_id": "BreakoutNoFrameskip-v4", "encoder": "mlp"}).intra_op_threads(
            stacked=False
        )
        == 1
    )
    assert (
        apply_overrides(Config(), {"env_id": "BreakoutNoFrameskip-v4", "torch_threads": 1}).intra_op_threads(
            stacked=False
        )
        == 1
    )
    with pytest.raises(
        FastPPOError, match="--run.torch-threads must be 0 \\(automatic\\) or a positive integer, got -1"
    ):
        apply_overrides(Config(), {"torch_threads": -1}).validate()


def test_an_mlp_takes_every_cpu_where_its_rows_are_wide_and_one_where_they_are_not(monkeypatch):
    import fastppo.config as config_module

    monkeypatch.setattr(config_module, "available_cpus", lambda: 6)

    def threads(**overrides):
        config = apply_overrides(Config(), {"num_steps": 64, "num_minibatches": 1} | overrides)
        return config.rollout_threads(stacked=False), config.intra_op_threads(stacked=False)

    # 64 x 64 hidden: 16 384 rows a minibatch are wide (2**26), 1 024 envs a step (2**22)
    assert threads(num_envs=256) == (1, 6)
    assert threads(num_envs=256, num_minibatches=2) == (1, 1)
    assert threads(num_envs=1024) == (6, 6)
    assert threads(num_envs=1023, num_minibatches=64) == (1, 1)
    assert threads(num_envs=256, hidden_sizes=(32, 32)) == (1, 1)  # a quarter of the work
    assert threads(num_envs=32, hidden_sizes=(256, 256)) == (1, 6)
    assert threads(num_envs=64, hidden_sizes=(256, 256)) == (6, 6)
    # recurrent cores keep one thread however wide (their ops stay small)
    assert threads(num_envs=1024, memory="lstm") == (1, 1)
    assert threads(num_envs=1024, torch_threads=1) == (1, 1)
    # acting on one env (fastppo eval) is narrow whatever the run's envs were
    wide = apply_overrides(Config(), {"num_envs": 1024})
    assert (wide.rollout_threads(stacked=False), wide.rollout_threads(stacked=False, rows=1)) == (6, 1)


def test_a_board_encoder_takes_every_cpu_by_its_convolutions_work(monkeypatch):
    import fastppo.config as config_module

    monkeypatch.setattr(config_module, "available_cpus", lambda: 6)

    def threads(**overrides):
        config = apply_overrides(Config(), {"encoder": "board", "num_envs": 64, "num_steps": 32} | overrides)
        return config.rollout_threads(stacked=False), config.intra_op_threads(stacked=False)

    # rows x 9 x channels**2 x (2 x blocks + 1) per cell: connect four's preset, 512-row minibatches
    # of 64 channels and 2 blocks, is wide in both (2**24 an update, 2**22 a step); at 32 channels
    # its update only; tic-tac-toe's, 256 rows of 16 channels and 1 block, in neither
    assert threads(num_minibatches=4, board_channels=64, board_blocks=2) == (6, 6)
    assert threads(num_minibatches=8, board_channels=16, board_blocks=1) == (1, 1)
    assert threads(num_minibatches=4, board_channels=32, board_blocks=2) == (1, 6)
    assert threads(num_minibatches=4, board_channels=64, board_blocks=2, torch_threads=1) == (1, 1)
    assert threads(num_minibatches=4, board_channels=64, board_blocks=2, memory="gru") == (1, 1)
    # an evaluation acting on one board stays on one thread
    preset = apply_overrides(Config(), {"encoder": "board", "num_envs": 64})
    assert preset.rollout_threads(stacked=False, rows=1) == 1


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("num_envs", "[1]", "--env.num-envs expects an integer, got '[1]'"),
        ("num_envs", "None", "--env.num-envs expects an integer, got 'None'"),
        ("num_envs", "1j", "--env.num-envs expects an integer, got '1j'"),
        ("num_envs", "True", "--env.num-envs expects an integer, got 'True'"),
        ("num_envs", "nan", "--env.num-envs expects an integer, got 'nan'"),
        ("num_envs", [1], "--env.num-envs expects an integer, got [1]"),  # YAML list
        ("num_envs", {"a": 1}, "--env.num-envs expects an integer, got {'a': 1}"),  # YAML mapping
        ("num_envs", None, "--env.num-envs expects an integer, got None"),  # YAML null
        ("learning_rate", [1], "--ppo.learning-rate expects a number, got [1]"),
        ("learning_rate", None, "--ppo.learning-rate expects a number, got None"),
        ("learning_rate", 10**400, "--ppo.learning-rate expects a number, got 1000"),  # beyond a float
        ("hidden_sizes", "[1j]", "--policy.hidden-sizes expects an integer, got '1j'"),
    ],
)
def test_values_of_the_wrong_type_are_refused_with_the_flag(key, value, message):
    with pytest.raises(FastPPOError) as error:
        apply_overrides(Config(), {key: value})
    assert str(error.value).startswith(message)


@pytest.mark.parametrize(
    "value, expected", [("1_000", 1000), ("0x10", 16), ("1e3", 1000), (" 7 ", 7), (8.0, 8), (12, 12)]
)
def test_integers_in_python_spellings_are_read(value, expected):
    assert apply_overrides(Config(), {"num_envs": value}).env.num_envs == expected


def test_a_preset_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "best.yaml"
    path.write_bytes(b"ppo:\n  learning_rate: \xff\xfe\n")
    with pytest.raises(FastPPOError, match=rf"^cannot read preset {path}: not UTF-8 text \(byte 22\)$"):
        load_preset(str(path))


def test_a_minibatch_of_one_row_is_refused_naming_the_flag():
    """One row: its normalised advantage divides by a std of 0, and the first update is NaN."""
    with pytest.raises(FastPPOError) as error:
        make_config("CartPole-v1", overrides={"num_envs": 2, "num_steps": 8, "num_minibatches": 16})
    assert str(error.value) == (
        "--num-minibatches 16 splits the batch of 16 steps (num_envs 2 x num_steps 8) into minibatches of 1 row, "
        "and a minibatch needs at least 2: give --num-minibatches 8 or fewer, or raise --num-envs or --num-steps"
    )
    assert (
        make_config("CartPole-v1", overrides={"num_envs": 2, "num_steps": 8, "num_minibatches": 8}).minibatch_size == 2
    )


def test_a_presets_minibatch_count_that_leaves_one_row_names_the_preset_and_the_flag():
    with pytest.raises(FastPPOError) as error:
        make_config("LunarLander-v3", overrides={"num_envs": 4, "num_steps": 64})
    assert str(error.value) == (
        "--num-minibatches 256 (the LunarLander-v3 preset's) splits the batch of 256 steps (num_envs 4 x "
        "num_steps 64) into minibatches of 1 row, "
        "and a minibatch needs at least 2: give --num-minibatches 128 or fewer, or raise --num-envs or --num-steps"
    )
    with pytest.raises(
        FastPPOError,
        match=(
            r"^--num-minibatches 1 splits the batch of 1 step \(num_envs 1 x num_steps 1\) into minibatches of 1 "
            r"row, and a minibatch needs at least 2: raise --num-envs or --num-steps$"
        ),
    ):
        make_config("LunarLander-v3", overrides={"num_envs": 1, "num_steps": 1, "num_minibatches": 1})


@pytest.mark.parametrize(
    "name, message",
    [
        ("meta", "unknown device 'meta': use cpu, cuda, cuda:N, mps or auto"),
        ("xla", "unknown device 'xla': use cpu, cuda, cuda:N, mps or auto"),
        ("tpu9", "unknown device 'tpu9': use cpu, cuda, cuda:N, mps or auto"),
        ("mps", "--device mps asked for, but torch sees no Apple MPS GPU: use --device cpu"),
        ("cuda:1", "--device cuda:1 asked for, but torch sees no CUDA GPU: use --device cpu"),
    ],
)
def test_devices_torch_cannot_train_on_here_are_refused(name, message):
    import torch

    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("these messages are for a machine with neither CUDA nor MPS")
    with pytest.raises(FastPPOError) as error:
        resolve_device(name)
    assert str(error.value) == message
