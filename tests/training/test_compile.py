"""--compile: the compiled update agrees with the eager one, on CPU and on a GPU when present
(--cudagraphs: tests/training/test_cuda_graphs.py).

One test runs the real inductor compile (20-60 s on a 2-core CPU; it needs a C++ compiler and is
skipped without one); the others run the same code path through torch.compile with the "eager"
backend (dynamo traces the loss, no code generation), which catches graph breaks and plumbing
mistakes in seconds.
"""

from __future__ import annotations

import functools
import json
import shutil

import pytest
import torch

import fastppo

TINY = dict(
    total_timesteps=256, num_envs=2, num_steps=64, num_minibatches=2, update_epochs=2, progress=False, tensorboard=False
)
LOSSES = (
    "losses/policy_loss",
    "losses/value_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/grad_norm",
)


def first_update_losses(**overrides) -> dict[str, float]:
    agent = fastppo.train("CartPole-v1", preset="cleanrl-discrete", seed=5, **{**TINY, **overrides})
    return {name: agent.history[0][name] for name in LOSSES}


@pytest.fixture
def eager_backend(monkeypatch):
    """torch.compile with dynamo's "eager" backend: traced graphs, run by eager kernels."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compile_flag_traces_and_matches_eager(eager_backend):
    eager = first_update_losses()
    compiled = first_update_losses(compile=True)
    assert compiled == pytest.approx(eager, rel=1e-5, abs=1e-6)


def test_compile_flag_on_tensor_backend(eager_backend):
    eager = first_update_losses(backend="tensor")
    compiled = first_update_losses(backend="tensor", compile=True)
    assert compiled == pytest.approx(eager, rel=1e-5, abs=1e-6)


INDUCTOR_CASES = ([("cpu", "sync")] if shutil.which("g++") or shutil.which("c++") else []) + (
    [pytest.param("cuda", backend, marks=pytest.mark.gpu) for backend in ("sync", "tensor")]
    if torch.cuda.is_available()
    else []
)
"""(device, env backend) runs inductor can compile here: on CPU it needs a C++ compiler."""


@pytest.mark.parametrize("device, backend", INDUCTOR_CASES)
def test_inductor_compiled_run_matches_eager_on_first_update(device, backend):
    # Inductor draws random numbers its own way unless told to call eager's RNG: without this the
    # compiled rollout samples other actions and the two updates see different data. The config's
    # own patch() restores it cleanly (monkeypatch's undo left the option hidden, which broke
    # torch.onnx.export in later tests).
    torch._dynamo.reset()
    eager = first_update_losses(device=device, backend=backend)
    with torch._inductor.config.patch(fallback_random=True):
        compiled = first_update_losses(device=device, backend=backend, compile=True)
    torch._dynamo.reset()
    # Inductor fuses and reorders float32 reductions: equal to rounding, not bit for bit.
    assert compiled == pytest.approx(eager, rel=1e-3, abs=1e-5)


def test_compile_flag_on_a_stack_of_seeds(eager_backend, tmp_path):
    """A stack of seeds (--seeds on tensor envs) compiles its rollout forward and its loss: the
    first update of each seed as the eager stack's."""
    from fastppo.cli.main import main

    flags = [
        "--preset",
        "cleanrl-discrete",
        "--backend",
        "tensor",
        "--seeds",
        "3,5",
        "--num-envs",
        "2",
        "--num-steps",
        "64",
        "--total-timesteps",
        "256",
        "--no-tensorboard",
        "--no-progress",
    ]
    for name, extra in (("eager", []), ("compiled", ["--compile"])):
        assert main(["train", "CartPole-v1", *flags, *extra, "--run-dir", str(tmp_path / name)]) == 0
    for seed in (3, 5):
        eager, compiled = (
            {
                k: json.loads((tmp_path / name / f"seed_{seed}" / "metrics.jsonl").read_text().splitlines()[0])[k]
                for k in LOSSES
            }
            for name in ("eager", "compiled")
        )
        assert compiled == pytest.approx(eager, rel=1e-5, abs=1e-6)


def test_compile_on_the_cpu_keeps_an_mlps_merged_rollout_forward_and_compiles_the_rest():
    """On the CPU the merged eager forward beats the compiled one (benchmarks/README.md, --compile):
    --compile leaves an MLP's rollout forward merged; a policy without one is compiled."""
    import gymnasium as gym

    from fastppo.config import PolicyConfig
    from fastppo.policies import ActorCritic
    from fastppo.policies.fused import FusedActorCritic
    from fastppo.training.rollout import PolicyStep

    obs, actions = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    assert isinstance(PolicyStep(ActorCritic(obs, actions), compile=True).act, FusedActorCritic)
    recurrent = ActorCritic(obs, actions, PolicyConfig(memory="gru", memory_size=8))  # no merged forward
    assert not isinstance(PolicyStep(recurrent, compile=True).act, FusedActorCritic)
    assert PolicyStep(recurrent, compile=False).act == recurrent.act


CNN_TINY = dict(TINY, total_timesteps=64, num_steps=32, update_epochs=1)


def first_cnn_update_losses(**overrides) -> dict[str, float]:
    agent = fastppo.train("BreakoutNoFrameskip-v4", seed=5, **{**CNN_TINY, **overrides})
    return {name: agent.history[0][name] for name in LOSSES}


def native_bf16_here() -> bool:
    from fastppo.devices import native_bf16

    return native_bf16(torch.device("cpu"))


@pytest.mark.parametrize(
    "precision",
    ["fp32", pytest.param("bf16", marks=pytest.mark.skipif(not native_bf16_here(), reason="no native bf16 here"))],
)
def test_compile_flag_on_the_nature_cnn_traces_act_and_update_and_matches_eager(eager_backend, monkeypatch, precision):
    """Atari's CNN policy: --compile compiles its rollout forward (no merged MLP forward to keep)
    and its update's loss, bf16 autocast inside them; the first update as eager's."""
    pytest.importorskip("ale_py")
    from fastppo.training.rollout import PolicyStep

    compiled_acts = []
    original = PolicyStep.__init__

    def recorded(self, policy, compile=False, cudagraphs=False):
        original(self, policy, compile, cudagraphs)
        compiled_acts.append(compile and self.act is not policy.act)

    monkeypatch.setattr(PolicyStep, "__init__", recorded)
    eager = first_cnn_update_losses(precision=precision)
    compiled = first_cnn_update_losses(precision=precision, compile=True)
    assert compiled_acts == [False, True]
    assert compiled == pytest.approx(eager, rel=1e-5, abs=1e-6)


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")), reason="inductor needs a C++ compiler on CPU")
def test_inductor_compiled_nature_cnn_run_matches_eager_on_first_update():
    pytest.importorskip("ale_py")
    torch._dynamo.reset()
    eager = first_cnn_update_losses()
    with torch._inductor.config.patch(fallback_random=True):
        compiled = first_cnn_update_losses(compile=True)
    torch._dynamo.reset()
    assert compiled == pytest.approx(eager, rel=1e-3, abs=1e-5)
