"""``TensorEnv``: a batch of environments held as one state tensor and stepped by torch ops.

This base class owns everything that is not physics, once for every tensor env: gymnasium's
NEXT_STEP autoreset, the ``TimeLimit`` truncation, seeding and episode statistics. A subclass
(one of ours or a user's Isaac-style simulator) only supplies

- ``_reset_state()``: fresh initial states for all ``num_envs`` rows, drawn with ``self.generator``;
- ``_dynamics(state, actions)``: ``(next_state, reward, terminated)`` for all rows;
- ``_observe(state)``: the observation of each row;

plus the class attributes ``single_observation_space``, ``single_action_space`` and
``max_episode_steps``. ``cartpole.py`` is a complete example, down to the constants it keeps as
tensors (``self._tensor``, in its ``__init__`` after ``super().__init__`` has set the device and
dtype). A constant that ``_reset_state`` needs must exist before ``super().__init__``, which
draws the first states: make it there from the constructor's own device and dtype arguments.

``step`` never synchronises with the host (no ``.item()``, no branching on tensor values), so it
runs asynchronously on CUDA: rows that reset are chosen with ``torch.where``, which is also why
``_reset_state`` draws a candidate initial state for *every* row on every step rather than for a
data-dependent subset (indexing by a mask would need its size on the host).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import Tensor

from fastppo.envs.layout import ObservationLayout
from fastppo.envs.vector import Episodes, StepResult
from fastppo.errors import FastPPOError


class TensorEnv(ABC):
    """A ``VecEnv`` (see ``fastppo.envs.vector``) whose envs all live in ``self.state``.

    ``state`` is a plain ``[num_envs, state_size]`` tensor of ``dtype`` on ``device``; assigning a
    new one between steps puts the envs into that state (tests use it to mirror gymnasium).
    ``dtype`` is float32 by default; float64 exists to check the physics against gymnasium's
    float64 numpy code to ~1e-12. Observations have ``dtype``; rewards are always float32.
    """

    # Set as class attributes by each subclass (one definition shared by its instances).
    single_observation_space: gym.spaces.Box
    single_action_space: gym.Space
    max_episode_steps: int
    layout: ObservationLayout = ObservationLayout()  # a row is all observation
    """Gymnasium's registered ``max_episode_steps`` (its ``TimeLimit``); the constructor may override it."""

    per_env_state: tuple[str, ...] = ("state", "_elapsed", "_episode_return", "_needs_reset")
    """The tensor attributes with one row per env (a subclass adds its own): what ``seed_block``
    slices."""

    pending_steps_limit: int = 256
    """Steps of per-env episode records kept before they are compacted to finished episodes only;
    bounds memory when ``pop_episodes`` is called rarely, at the cost of one host sync per
    ``pending_steps_limit`` steps on CUDA."""

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        seed: int | Sequence[int] | None = None,
        max_episode_steps: int | None = None,
        seed_blocks: int = 1,
    ) -> None:
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.dtype = dtype
        if max_episode_steps is not None:
            self.max_episode_steps = max_episode_steps
        if seed_blocks < 1 or num_envs % seed_blocks:
            raise FastPPOError(f"{num_envs} envs do not split into {seed_blocks} equal seed blocks")
        # One generator per block of rows (a stack of seeds, fastppo.training.seed_stack: each seed's envs
        # draw what its single run's envs draw); usually just one, ``generator``.
        self.generators = [torch.Generator(device=self.device) for _ in range(seed_blocks)]
        self._seed(seed)
        self.state = self._reset_state()
        self._check("_reset_state()", "state", self.state, (num_envs, None))
        self._check(
            "_observe(state)",
            "observation",
            self._observe(self.state),
            (num_envs, *self.single_observation_space.shape),
        )
        self._dynamics_checked = False  # on the first step: a user's env fails there, clearly, not deep in the trainer
        self._elapsed = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._episode_return = torch.zeros(num_envs, dtype=torch.float32, device=self.device)
        # True where the previous step ended an episode: this step is that env's reset row.
        self._needs_reset = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        # Per step, [num_envs] episode returns so far and [num_envs] lengths of the episodes that
        # ended there (0 for those still running).
        self._pending: list[tuple[Tensor, Tensor]] = []
        # (returns, lengths, env rows) blocks holding only finished episodes.
        self._finished: list[tuple[Tensor, Tensor, Tensor]] = []

    @property
    def generator(self) -> torch.Generator:
        """The first seed block's generator: the envs' one generator but in a stack of seeds."""
        return self.generators[0]

    def _seed(self, seed: int | Sequence[int] | None) -> None:
        seeds = [seed] * len(self.generators) if seed is None or isinstance(seed, int) else list(seed)
        if len(seeds) != len(self.generators):
            raise FastPPOError(f"{len(seeds)} seeds for {len(self.generators)} seed blocks of envs")
        for generator, value in zip(self.generators, seeds):
            if value is None:
                generator.seed()  # nondeterministic, like an unseeded gymnasium env
            else:
                generator.manual_seed(value)

    def seed_block(self, index: int) -> TensorEnv:
        """Seed block ``index`` as an env of its own (a shallow copy holding that block's rows and
        generator, at an iteration boundary): a stack of seeds checkpoints each seed as the single
        run it stands for (fastppo.training.seed_stack)."""
        block = copy.copy(self)
        rows = self.num_envs // len(self.generators)
        block.num_envs = rows
        for name in self.per_env_state:
            setattr(block, name, getattr(self, name)[index * rows : (index + 1) * rows])
        block.generators = [self.generators[index]]
        block._pending, block._finished = [], []
        return block

    def load_seed_block(self, index: int, tensors: dict[str, Tensor]) -> None:
        """The inverse of ``seed_block``: write a block's saved rows (its per-env tensors by name)
        and its generator's state (``generator``) back into block ``index``."""
        rows = self.num_envs // len(self.generators)
        for name in self.per_env_state:
            getattr(self, name)[index * rows : (index + 1) * rows] = tensors[name].to(self.device)
        self.generators[index].set_state(tensors["generator"])

    def keep_seed_blocks(self, indices: list[int]) -> None:
        """Keep only the seed blocks at ``indices`` (in that order), at an iteration boundary: a
        stack of seeds drops the seeds that are done (``--run.stop-return``)."""
        assert not self._pending and not self._finished, (
            "between pop_episodes and the next step only: queued rows would be renumbered"
        )
        blocks = len(self.generators)
        for name in self.per_env_state:  # [blocks, rows per block, ...]: the kept blocks in order
            setattr(self, name, getattr(self, name).unflatten(0, (blocks, -1))[indices].flatten(0, 1))
        self.generators = [self.generators[i] for i in indices]
        self.num_envs = self.num_envs // blocks * len(indices)

    # --- what a subclass implements -------------------------------------------------------

    @abstractmethod
    def _reset_state(self) -> Tensor:
        """``[num_envs, state_size]`` fresh initial states drawn with ``self.generator``."""

    @abstractmethod
    def _dynamics(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One transition for every row: ``(next_state, reward [N], terminated [N] bool)``.

        Must be pure (no writes to ``self``): rows that are resetting are computed and discarded.
        """

    @abstractmethod
    def _observe(self, state: Tensor) -> Tensor:
        """``[num_envs, *obs_shape]`` observations; a new tensor, never a view of ``state``."""

    # --- the VecEnv interface --------------------------------------------------------------

    def reset(self, seed: int | Sequence[int] | None = None) -> StepResult:
        """Start a new episode in every env; with ``seed``, reseed the generator first (one seed
        per seed block, see ``seed_blocks``).

        Unfinished episodes are dropped from the statistics; finished ones stay until popped.
        """
        if seed is not None:
            self._seed(seed)
        self.state = self._reset_state()
        self._elapsed.zero_()
        self._episode_return.zero_()
        self._needs_reset.zero_()
        no = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        reward = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)
        return StepResult(self._observe(self.state), reward, no, no.clone())

    def step(self, actions: Tensor) -> StepResult:
        """Step every env; envs whose episode ended at the previous step reset instead.

        A reset row ignores its action and returns the new episode's first observation with
        reward 0 and both flags false (gymnasium's ``AutoresetMode.NEXT_STEP``). ``truncated``
        follows gymnasium's ``TimeLimit``: true once an episode has run ``max_episode_steps``
        steps, whether or not that step also terminated.
        """
        reset_rows = self._needs_reset
        next_state, reward, terminated = self._dynamics(self.state, actions)
        if not self._dynamics_checked:
            self._check("_dynamics(state, actions)", "next_state", next_state, tuple(self.state.shape))
            self._check("_dynamics(state, actions)", "reward", reward, (self.num_envs,))
            self._check("_dynamics(state, actions)", "terminated", terminated, (self.num_envs,), torch.bool)
            self._dynamics_checked = True
        self.state = torch.where(reset_rows.unsqueeze(1), self._reset_state(), next_state)
        reward = reward.masked_fill(reset_rows, 0.0).to(torch.float32)
        terminated = terminated & ~reset_rows
        self._elapsed = (self._elapsed + 1).masked_fill_(reset_rows, 0)
        truncated = self._elapsed >= self.max_episode_steps
        self._needs_reset = terminated | truncated
        self._record_episodes(reset_rows, reward)
        return StepResult(self._observe(self.state), reward, terminated, truncated)

    def pop_episodes(self) -> Episodes:
        """Returns and lengths of the episodes finished since the last call, in finishing order.

        One host sync; call it once per training iteration.
        """
        self._compact_pending()
        if not self._finished:
            return Episodes(returns=[], lengths=[])
        returns, lengths, rows = (torch.cat(column).cpu().tolist() for column in zip(*self._finished))
        self._finished.clear()
        return Episodes(returns=returns, lengths=lengths, rows=rows)

    def close(self) -> None:
        """Nothing to release: the envs are tensors."""
        return None  # a no-op on purpose, not an abstract method a subclass must write

    # --- episode statistics ------------------------------------------------------------------

    def _record_episodes(self, reset_rows: Tensor, reward: Tensor) -> None:
        """Accumulate returns on device and queue this step's returns and lengths-if-finished.

        The running length is ``self._elapsed``: both restart at the reset row, which is not part
        of any episode (its reward is 0 and it is masked out of training). Each step's
        ``_episode_return`` is a new tensor, so the queued one is never overwritten.
        """
        self._episode_return = self._episode_return.masked_fill(reset_rows, 0.0) + reward
        self._pending.append((self._episode_return, self._elapsed * self._needs_reset))
        if len(self._pending) >= self.pending_steps_limit:
            self._compact_pending()

    def _compact_pending(self) -> None:
        """Keep only the rows of finished episodes (every episode lasts at least one step)."""
        if not self._pending:
            return
        returns, lengths = (torch.cat(column) for column in zip(*self._pending))
        ended = lengths > 0
        rows = torch.arange(self.num_envs, device=self.device).repeat(len(self._pending))
        self._finished.append((returns[ended], lengths[ended], rows[ended]))
        self._pending.clear()

    def _check(
        self, method: str, name: str, value: object, shape: tuple[int | None, ...], dtype: torch.dtype | None = None
    ) -> None:
        """A one-line error naming the method when it returns the wrong kind of ``name`` (None in
        ``shape``: any size there)."""
        ok = (
            isinstance(value, Tensor)
            and value.dim() == len(shape)
            and all(want in (None, got) for want, got in zip(shape, value.shape))
            and (dtype is None or value.dtype == dtype)
        )
        if not ok:
            got = (
                f"a {value.dtype} tensor of shape {tuple(value.shape)}"
                if isinstance(value, Tensor)
                else type(value).__name__
            )
            want = "x".join("*" if n is None else str(n) for n in shape)
            kind = f"a {dtype} tensor" if dtype is not None else "a tensor"
            raise FastPPOError(
                f"{type(self).__name__}.{method} gave {name} as {got}: expected {kind} of shape [{want}]"
            )

    # --- helpers for subclasses --------------------------------------------------------------

    def _uniform(self, low: float, high: float, columns: int = 1) -> Tensor:
        """``[num_envs, columns]`` draws from U[low, high) (torch's ``uniform_``: ``low + (high - low) * U``,
        the formula of ``numpy.random.Generator.uniform``, which gymnasium resets with); each seed
        block's rows from its own generator."""
        out = torch.empty(self.num_envs, columns, dtype=self.dtype, device=self.device)
        for block, generator in zip(out.view(len(self.generators), -1, columns), self.generators):
            block.uniform_(low, high, generator=generator)
        return out

    def _tensor(self, values: float | list[float]) -> Tensor:
        """A constant as a tensor of the env's dtype on its device (for ``_dynamics``)."""
        return torch.tensor(values, dtype=self.dtype, device=self.device)
