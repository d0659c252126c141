"""ONNX export: onnxruntime gives the torch policy's deterministic actions on a batch."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import fastppo
import fastppo.agents.export
from fastppo.cli.main import main
from fastppo.errors import FastPPOError


def observations(env_id: str, n: int = 256) -> np.ndarray:
    """Real observations from a random-action rollout, plus out-of-distribution ones."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    rows = []
    for _ in range(n // 2):
        rows.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    rng = np.random.default_rng(0)
    rows += list(rng.normal(0, 2, (n - len(rows), *env.observation_space.shape)))
    return np.asarray(rows, dtype=np.float32)


@pytest.fixture(scope="module", params=["CartPole-v1", "Pendulum-v1"])
def run(request, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("export") / "run"
    fastppo.train(
        request.param, run_dir=run, total_timesteps=512, num_envs=2, num_steps=64, num_minibatches=2,
        normalize_obs=True, progress=False, tensorboard=False,
    )  # fmt: skip
    return run


def check_same_actions(run: Path, path: Path) -> None:
    agent = fastppo.load(run)
    obs = observations(agent.config.env.env_id)
    session = ort.InferenceSession(str(path))
    onnx_actions = session.run(["action"], {"obs": obs})[0]
    torch_actions = agent.act(obs, deterministic=True)
    space = gym.make(agent.config.env.env_id).action_space
    if isinstance(space, gym.spaces.Box):
        torch_actions = np.clip(torch_actions, space.low, space.high)
        np.testing.assert_allclose(onnx_actions, torch_actions, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(onnx_actions, torch_actions)
    assert onnx_actions.shape[0] == len(obs)
    assert session.run(["action"], {"obs": obs[:1]})[0].shape[0] == 1  # dynamic batch


def test_cli_export_matches_the_torch_policy(run, tmp_path, capsys):
    path = tmp_path / "policy.onnx"
    assert main(["export", str(run), "--onnx", str(path)]) == 0
    obs_size, action = (4, "[batch]") if "CartPole" in str(fastppo.load(run).config.env.env_id) else (3, "[batch, 1]")
    assert (
        capsys.readouterr().out
        == f"fastppo: wrote {path} (input 'obs' [batch, {obs_size}]; output 'action' {action})\n"
    )
    check_same_actions(run, path)
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert props["producer"] == "fastppo" and props["env_id"] == fastppo.load(run).config.env.env_id


def test_torchscript_exporter_fallback_without_onnxscript(run, tmp_path, monkeypatch):
    monkeypatch.setattr(fastppo.agents.export, "_has_onnxscript", lambda: False)
    check_same_actions(run, fastppo.export_onnx(run, tmp_path / "legacy.onnx"))


def test_opsets_the_exporter_cannot_write_are_refused(run, tmp_path, capsys, monkeypatch):
    path = tmp_path / "p.onnx"
    assert main(["export", str(run), "--onnx", str(path), "--opset", "14"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "fastppo: error: --opset 14 is outside what the torch.export ONNX exporter writes correctly: pick 15 to "
    )
    assert err.count("\n") == 1 and not path.exists()
    monkeypatch.setattr(fastppo.agents.export, "_has_onnxscript", lambda: False)
    assert main(["export", str(run), "--onnx", str(path), "--opset", "7"]) == 2
    assert "the TorchScript ONNX exporter writes correctly: pick 8 to " in capsys.readouterr().err


def test_the_lowest_opsets_export_quietly_and_correctly(run, tmp_path, capsys, monkeypatch):
    path = tmp_path / "p15.onnx"
    assert main(["export", str(run), "--onnx", str(path), "--opset", "15"]) == 0
    assert capsys.readouterr().err == ""  # no converter narration
    assert [o.version for o in onnx.load(str(path)).opset_import if o.domain == ""] == [15]
    check_same_actions(run, path)
    monkeypatch.setattr(fastppo.agents.export, "_has_onnxscript", lambda: False)
    check_same_actions(run, fastppo.agents.export.export_onnx(run, tmp_path / "p8.onnx", opset=8))


def test_an_export_that_keeps_another_opset_is_an_error(run, tmp_path, monkeypatch):
    # What the torch.export exporter does when it cannot convert: log a traceback, keep opset 18.
    export = fastppo.agents.export._torch_onnx_export
    monkeypatch.setattr(
        fastppo.agents.export,
        "_torch_onnx_export",
        lambda module, examples, outputs, path, opset, dynamo: export(module, examples, outputs, path, 18, True),
    )
    with pytest.raises(FastPPOError, match="the ONNX exporter wrote opset 18, not the requested 17"):
        fastppo.agents.export.export_onnx(run, tmp_path / "p.onnx", opset=17)
    assert not list(tmp_path.iterdir())  # neither the file nor a temporary one
