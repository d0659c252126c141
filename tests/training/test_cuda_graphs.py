"""--cudagraphs: the captured update epochs and policy step compute what the eager ones do.

Without a GPU the same wrapper code runs against a CPU stand-in for CUDA graphs (``cpu_graphs``):
capture runs the function once for the shape of its outputs and then undoes what it changed
(a CUDA capture records kernels without running them), and replay runs it again on the static
inputs and writes the results into the captured outputs. That checks everything around the graph
(warm-up count, when to recapture, static inputs and outputs, the optimizer's steps) on
every machine; the same tests run on real CUDA graphs when a GPU is present.
"""

from __future__ import annotations

import copy
from functools import partial

import gymnasium as gym
import pytest
import torch

import fastppo
from fastppo.config import PPOConfig
from fastppo.errors import FastPPOError
from fastppo.policies import ActorCritic
from fastppo.training.rollout import PolicyStep
from fastppo.training.update import (
    MinibatchStep,
    RowMinibatches,
    UpdateCoefficients,
    make_optimizer,
    ppo_update,
    set_learning_rate,
)

DEVICES = ["cpu"] + ([pytest.param("cuda", marks=pytest.mark.gpu)] if torch.cuda.is_available() else [])


class CPUGraph:
    """What a replay does, on CPU: recompute ``fn(*static_inputs)`` into the captured outputs."""

    def __init__(self, fn, args, outputs):
        self.fn, self.args, self.outputs = fn, args, outputs

    def replay(self) -> None:
        fresh = self.fn(*self.args)
        pairs = zip(self.outputs.values(), fresh.values()) if isinstance(fresh, dict) else zip(self.outputs, fresh)
        for captured, value in pairs:
            captured.copy_(value)


def graph_owner(fn):
    """The object whose method a capture runs (the update's epoch is a partial of one)."""
    return getattr(getattr(fn, "func", fn), "__self__", None)


@pytest.fixture
def cpu_graphs(monkeypatch):
    """Patch the three CUDA-graph helpers where the rollout, the update and the trainer use them;
    yields the list of captures made."""
    import fastppo.training.rollout
    import fastppo.training.trainer
    import fastppo.training.update

    captures: list[CPUGraph] = []

    def capture(fn, *args):
        owner = graph_owner(fn)
        touched = []  # what fn changes besides the RNG: a minibatch step's weights, gradient, Adam state
        if isinstance(owner, MinibatchStep):
            touched = [owner.flat_parameter.data, owner.flat_parameter.grad]
            touched += [
                t for state in owner.optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)
            ]
        before = [t.clone() for t in touched]
        with torch.random.fork_rng():
            outputs = fn(*args)
        for tensor, value in zip(touched, before):
            tensor.copy_(value)
        captures.append(CPUGraph(fn, args, outputs))
        return captures[-1], outputs

    for module in (fastppo.training.rollout, fastppo.training.update):
        monkeypatch.setattr(module, "capture_graph", capture)
        monkeypatch.setattr(module, "on_side_stream", lambda fn, *args: fn(*args))
    for module in (fastppo.training.rollout, fastppo.training.update, fastppo.training.trainer):
        monkeypatch.setattr(module, "check_cudagraphs", lambda device: None)
    return captures


@pytest.fixture(params=DEVICES)
def graph_device(request) -> tuple[str, list[CPUGraph] | None]:
    """The device the graphs run on and, on CPU, the stand-in's list of captures."""
    return (request.param, request.getfixturevalue("cpu_graphs") if request.param == "cpu" else None)


def minibatches(n: int, rows: int, device: str) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        {
            k: v.to(device)
            for k, v in dict(
                obs=torch.randn(rows, 4, generator=g),
                actions=torch.randint(0, 2, (rows,), generator=g),
                logprobs=-0.3 - torch.rand(rows, generator=g),
                values=torch.randn(rows, generator=g),
                advantages=torch.randn(rows, generator=g),
                returns=torch.randn(rows, generator=g),
                valid=torch.rand(rows, generator=g) > 0.1,
            ).items()
        }
        for _ in range(n)
    ]


def test_graphed_update_epochs_match_the_eager_epochs(graph_device):
    device, captures = graph_device
    torch.manual_seed(0)
    policy = ActorCritic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)).to(device)
    twin = copy.deepcopy(policy)
    cfg, coefs = PPOConfig(update_epochs=3, num_minibatches=4), UpdateCoefficients(0.2, 0.01, 1.0)
    eager_opt = make_optimizer(policy, 1e-2, 1e-5, torch.device(device))
    graphed_opt = make_optimizer(twin, 1e-2, 1e-5, torch.device(device), cudagraphs=True)
    eager, graphed = MinibatchStep(policy, eager_opt, cfg), MinibatchStep(twin, graphed_opt, cfg, cudagraphs=True)
    # The eager reference keeps the reset rows masked, as the graphed update does (fixed shapes).
    eager.minibatches = partial(RowMinibatches, num_minibatches=4, drop_reset_rows=False)
    for i, batch in enumerate(minibatches(4, 256, device)):  # four updates, each a new batch
        if i == 3:  # a new lr is a graph constant: it must recapture
            set_learning_rate(eager_opt, 5e-3)
            set_learning_rate(graphed_opt, 5e-3)
        torch.manual_seed(10 + i)  # the same shuffles: the graph's order is drawn as the eager one
        expected = ppo_update(policy, eager_opt, batch, cfg, coefs, eager)
        torch.manual_seed(10 + i)
        got = ppo_update(twin, graphed_opt, batch, cfg, coefs, graphed)
        assert got == pytest.approx(expected, rel=1e-5, abs=1e-6), f"update {i}"
        assert got["epochs"] == 3
    for a, b in zip(policy.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    if captures is not None:
        # 2 eager warm-up epochs, a capture at the third (update 0), replays, a recapture at update 3.
        assert len(captures) == 2


def test_graphed_policy_step_samples_like_the_eager_act(graph_device):
    device, captures = graph_device
    torch.manual_seed(0)
    policy = ActorCritic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3)).to(device)
    graphed = PolicyStep(policy, cudagraphs=True)
    g = torch.Generator().manual_seed(1)
    observations = [torch.randn(16, 4, generator=g).to(device) for _ in range(6)]
    torch.manual_seed(2)
    with torch.inference_mode():
        outputs = [tuple(t.clone() for t in graphed(obs)) for obs in observations]  # the collector copies at once
    torch.manual_seed(2)
    for obs, (action, logprob, value) in zip(observations, outputs):
        with torch.inference_mode():
            eager_action, eager_logprob, eager_value = policy.act(obs)
            scored, _, _ = policy.evaluate(obs, action)
        torch.testing.assert_close(value, eager_value)
        torch.testing.assert_close(logprob, scored)  # the logprob is that of the action it returned
        if captures is not None:  # a CUDA graph draws from its own Philox offsets: other samples, same law
            assert torch.equal(action, eager_action)
    if captures is not None:
        assert len(captures) == 1  # one input signature: one capture after 3 warm-up calls


def test_cudagraphs_training_loop_runs_its_graphs(cpu_graphs):
    # The whole loop on the CPU stand-in: the update keeps the reset rows masked (fixed shapes)
    # and the rollout copies each graphed policy output before the next call.
    agent = fastppo.train(
        "CartPole-v1",
        preset="cleanrl-discrete",
        seed=3,
        cudagraphs=True,
        total_timesteps=1024,
        num_envs=4,
        num_steps=64,
        progress=False,
        tensorboard=False,
    )
    assert len(agent.history) == 4
    assert all(torch.isfinite(torch.tensor(row["losses/value_loss"])) for row in agent.history)
    kinds = {type(graph_owner(graph.fn)).__name__ for graph in cpu_graphs}
    assert kinds == {"MinibatchStep", "ActorCritic"}
    # The update recaptures when its annealed lr moves: once per iteration.
    assert sum(isinstance(graph_owner(graph.fn), MinibatchStep) for graph in cpu_graphs) == 4


def test_cudagraphs_on_cpu_is_a_clear_error():
    with pytest.raises(FastPPOError, match="needs --device cuda"):
        fastppo.train(
            "CartPole-v1",
            preset="cleanrl-discrete",
            cudagraphs=True,
            device="cpu",
            total_timesteps=512,
            progress=False,
            tensorboard=False,
        )


def test_cudagraphs_on_cpu_exits_2_from_the_cli(capsys):
    from fastppo.cli.main import main

    code = main(
        ["train", "CartPole-v1", "--cudagraphs", "--device", "cpu", "--total-timesteps", "1024", "--progress", "false"]
    )
    assert code == 2
    assert "needs --device cuda" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["sync", "tensor"])
def test_cudagraphs_run_on_gpu_learns_cartpole(backend):
    # Not compared loss for loss with an eager run: graphed sampling draws other random numbers
    # and the graphed update keeps reset rows masked instead of dropping them, so the minibatches
    # differ. The step-level tests above compare the computations themselves.
    agent = fastppo.train(
        "CartPole-v1", seed=1, device="cuda", backend=backend, cudagraphs=True, progress=False, tensorboard=False
    )
    assert sum(agent.episode_returns[-20:]) / 20 >= 400  # every CPU seed ends at 500; margin for other numerics
