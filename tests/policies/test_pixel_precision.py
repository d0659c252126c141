"""--policy.precision bf16: the Nature CNN under bf16 autocast, fp32 master weights, heads and
losses; refused where bf16 is not native, and on MLP policies; old run folders load as fp32; auto
(the default) chooses bf16 for a pixel policy where it is native, and the run folder keeps the choice."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from fastppo.cli.main import main
from fastppo.config import Config, PolicyConfig
from fastppo.policies import ActorCritic

pytest.importorskip("ale_py", reason='ale-py is not installed: pip install -e ".[atari]"')

FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
OUTPUT_TOLERANCE = 0.02
"""bf16 keeps 8 bits of mantissa (relative error ~0.4% per rounding): through three convolutions
and the 3136 -> 512 layer the heads' outputs moved by 0.5% of their largest here (values 0.0045
of 0.87, logits 7e-5 of 0.014); the bound: 2% of the largest."""
GRADIENT_TOLERANCE = 0.25
"""The gradients' rounding adds up over the batch and the positions, with cancellation: each
parameter's bf16 gradient was 0.3-15% of its fp32 norm away (the actor's encoder the most, its
gradient being small, through the 0.01-gain action head); the bound: 25%, the same direction."""


def assert_close_to_scale(found: torch.Tensor, expected: torch.Tensor) -> None:
    assert (found - expected).abs().max() <= OUTPUT_TOLERANCE * expected.abs().max()


def twin_policies() -> tuple[ActorCritic, ActorCritic]:
    torch.manual_seed(0)
    fp32 = ActorCritic(FRAMES, gym.spaces.Discrete(4), PolicyConfig(precision="fp32"))
    bf16 = ActorCritic(FRAMES, gym.spaces.Discrete(4), PolicyConfig(precision="bf16"))
    bf16.load_state_dict(fp32.state_dict())
    return fp32, bf16


def test_bf16_computes_the_cnn_in_bf16_and_equals_fp32_within_the_stated_tolerance():
    fp32, bf16 = twin_policies()
    conv_outputs = []
    bf16.actor_encoder.convs[0].register_forward_hook(lambda _, __, out: conv_outputs.append(out.dtype))
    frames = torch.randint(0, 256, (16, 4, 84, 84), dtype=torch.uint8)
    actions = torch.randint(0, 4, (16,))
    with torch.no_grad():
        (logits32, value32), (logits16, value16) = fp32(frames), bf16(frames)
    assert conv_outputs == [torch.bfloat16]
    assert logits16.dtype == value16.dtype == torch.float32  # the heads compute in fp32
    assert not torch.equal(value16, value32)  # bf16 did round
    assert_close_to_scale(value16, value32)
    assert_close_to_scale(logits16, logits32)

    # The update: the loss in fp32 from fp32 outputs; the gradients land on the fp32 weights.
    for policy in (fp32, bf16):
        logprob, entropy, value = policy.evaluate(frames, actions)
        assert logprob.dtype == entropy.dtype == value.dtype == torch.float32
        (value.square().mean() - logprob.mean()).backward()
    for (name, weight32), weight16 in zip(fp32.named_parameters(), bf16.parameters()):
        assert weight16.dtype == weight16.grad.dtype == torch.float32, name
        assert (weight16.grad - weight32.grad).norm() <= GRADIENT_TOLERANCE * weight32.grad.norm(), name


def test_an_old_config_without_precision_loads_as_fp32():
    saved = Config().to_dict()
    del saved["policy"]["precision"]
    assert Config.from_dict(saved).policy.precision == "fp32"
    del saved["policy"]["memory_size"]  # any other field missing is damage, as before
    with pytest.raises(ValueError, match="lacks policy.memory_size"):
        Config.from_dict(saved)


def train_args(tmp_path, env_id: str, precision: str = "bf16") -> list[str]:
    return [
        "train", env_id, "--policy.precision", precision, "--run-dir", str(tmp_path / "run"), "--total-timesteps", "64",
        "--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1", "--progress", "false",
    ]  # fmt: skip


def without_native_bf16(monkeypatch) -> None:
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)


def test_bf16_on_a_cpu_without_it_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    without_native_bf16(monkeypatch)
    assert main(train_args(tmp_path, "BreakoutNoFrameskip-v4")) == 2
    message = "--policy.precision bf16 on a CPU without it (no AVX512-BF16 or AMX): use --policy.precision fp32"
    assert capsys.readouterr().err == f"fastppo: error: {message}\n"
    assert not (tmp_path / "run").exists()


def test_bf16_on_an_mlp_policy_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(train_args(tmp_path, "CartPole-v1")) == 2
    message = (
        "--policy.precision bf16 computes the Nature CNN of a pixel policy (an Atari id, or "
        "--policy.encoder cnn), and this policy has none (it trains in fp32): drop it"
    )
    assert capsys.readouterr().err == f"fastppo: error: {message}\n"


@pytest.mark.skipif(
    not (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()), reason="no native bf16 here"
)
def test_a_bf16_breakout_run_trains_and_saves_its_precision(tmp_path):
    assert main(train_args(tmp_path, "BreakoutNoFrameskip-v4")) == 0
    from fastppo.agents.agent import load_agent

    agent = load_agent(tmp_path / "run")
    assert agent.config.policy.precision == "bf16" and agent.policy.actor_encoder.autocast
    # Its ONNX file computes in fp32, which ONNX runtimes run (a bf16 convolution they refuse).
    ort = pytest.importorskip("onnxruntime")
    from fastppo.agents.export import export_onnx

    session = ort.InferenceSession(str(export_onnx(agent, tmp_path / "policy.onnx")))
    frames = np.random.default_rng(0).integers(0, 256, (8, 4, 84, 84), dtype=np.uint8)
    agent.policy.actor_encoder.autocast = False
    (actions,) = session.run(None, {"obs": frames})
    np.testing.assert_array_equal(actions, agent.act(frames, deterministic=True))


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("env_id", ["BreakoutNoFrameskip-v4", "CartPole-v1"])
def test_auto_chooses_bf16_for_a_pixel_policy_where_it_is_native_else_fp32(monkeypatch, native, env_id):
    import fastppo
    from fastppo.training.trainer import precision_for

    if native:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    else:
        without_native_bf16(monkeypatch)
    config = fastppo.make_config(env_id)
    assert config.policy.precision == "auto"
    chosen = precision_for(config, torch.device("cpu"))
    assert chosen.policy.precision == ("bf16" if native and env_id.startswith("Breakout") else "fp32")
    assert config.policy.precision == "auto"  # the caller's config is left as it was
    explicit = fastppo.make_config(env_id, overrides={"precision": "fp32"})
    assert precision_for(explicit, torch.device("cpu")) is explicit


@pytest.mark.parametrize("native", [True, False])
def test_a_default_breakout_run_saves_the_precision_it_chose_and_resumes_with_it(tmp_path, monkeypatch, capsys, native):
    import yaml

    from fastppo.agents.agent import load_agent

    if not native:
        without_native_bf16(monkeypatch)
    elif not (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()):
        pytest.skip("no native bf16 here")
    assert main(train_args(tmp_path, "BreakoutNoFrameskip-v4", "auto")) == 0
    chosen = "bf16" if native else "fp32"
    header = capsys.readouterr().out.splitlines()
    assert header[0].endswith(f", on cpu (2 threads, {chosen})") or header[0].endswith(f"thread, {chosen})")
    assert "precision" not in header[2]  # the differs-from-the-defaults line: the choice is the default's
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["policy"]["precision"] == chosen
    assert load_agent(tmp_path / "run").policy.actor_encoder.autocast == native
    assert main(["train", "--resume", str(tmp_path / "run"), "--total-timesteps", "128"]) == 0
    resumed = capsys.readouterr().out.splitlines()
    assert resumed[1].split(" on cpu ")[1] == header[0].split(" on cpu ")[1] and "precision" not in resumed[3]
    if native:  # resumed where bf16 is not native, the run would compute otherwise: one line, exit 2
        without_native_bf16(monkeypatch)
        assert main(["train", "--resume", str(tmp_path / "run"), "--total-timesteps", "192"]) == 2


def test_a_bf16_cnn_collects_on_the_updates_threads(monkeypatch):
    """oneDNN rebuilds its bf16 convolutions after each change of torch's thread count: a bf16
    run's rollout keeps the update's threads (every CPU, 3 here), where fp32's collects on one."""
    import fastppo
    import fastppo.config as config_module

    monkeypatch.setattr(config_module, "available_cpus", lambda: 3)
    fp32, bf16 = (fastppo.make_config("BreakoutNoFrameskip-v4", overrides={"precision": p}) for p in ("fp32", "bf16"))
    assert (fp32.rollout_threads(stacked=False), fp32.intra_op_threads(stacked=False)) == (1, 3)
    assert (bf16.rollout_threads(stacked=False), bf16.intra_op_threads(stacked=False)) == (3, 3)
