"""One small logger with three backends: TensorBoard, metrics.jsonl and a live console view.

Metric names follow CleanRL's (charts/episodic_return, losses/approx_kl, ...) so that fastppo and
CleanRL runs line up in one TensorBoard.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _count(n: float) -> str:
    """A step count in at most 5 characters: 2048, 51.2k, 100k, 1.5M."""
    if n < 10_000:
        return str(int(n))
    unit = ""
    for bigger in "kMG":
        if n < 999.5:
            break
        n, unit = n / 1000, bigger
    return f"{n:.3g}{unit}"


BAR_WIDTH = 10
FIXED_WIDTH = BAR_WIDTH + 8 + len("eta") + 8 + 5
"""What the progress line spends besides the steps and the figures: the bar, elapsed and remaining
time (up to 99:59:59) and the gaps between its six columns."""


# (label, metric, format) of the figures the progress bar shows for a gymnasium run.
GYM_SUMMARY = (
    ("SPS", "charts/SPS", ".0f"),
    ("return", "charts/episodic_return", ".1f"),
    ("kl", "losses/approx_kl", ".4f"),
    ("clip", "losses/clipfrac", ".3f"),
)


class RunLogger:
    """Writes scalars for a step to every enabled backend; keeps the history in memory too."""

    def __init__(
        self,
        run_dir: Path | None,
        total_steps: int,
        tensorboard: bool,
        progress: bool,
        config: dict[str, Any] | None = None,
        purge_step: int | None = None,
        summary: tuple[tuple[str, str, str], ...] = GYM_SUMMARY,
    ):
        """``purge_step``: on resume, TensorBoard drops events logged at this step or later by the
        interrupted process, so the curves continue without duplicates; the progress bar starts
        there too. ``summary`` picks the metrics the progress bar shows."""
        self.run_dir = run_dir
        self.summary = summary
        self.history: list[dict[str, float]] = []
        self.console = Console(stderr=True)
        self._jsonl = None
        self._writer = None
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            self._jsonl = (run_dir / "metrics.jsonl").open("a", encoding="utf-8")
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter

                # A queue of 10 (the default) made each ~25-scalar iteration wait on the writer
                # thread; 1000 never fills between its flushes (every 10 s, and at close).
                self._writer = SummaryWriter(str(run_dir), purge_step=purge_step, max_queue=1000, flush_secs=10)
                if config is not None and purge_step is None:
                    rows = "\n".join(f"|{k}|{v}|" for k, v in _flatten(config).items())
                    self._writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{rows}")
        self._progress = None
        self._shown: dict[str, float] = {}
        self._total = _count(total_steps)
        if progress:
            self._progress = Progress(
                BarColumn(bar_width=BAR_WIDTH),
                TextColumn("{task.fields[steps]}"),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            start = purge_step or 0
            self._task = self._progress.add_task("train", total=total_steps, completed=start, steps=f"{_count(start)}/{self._total}", stats="")
            self._progress.start()

    def log(self, step: int, metrics: dict[str, float]) -> None:
        record = {"global_step": step, "time": time.time(), **metrics}
        self.history.append(record)
        if self._jsonl is not None:
            self._jsonl.write(json.dumps(record) + "\n")
            self._jsonl.flush()
        if self._writer is not None:
            for name, value in metrics.items():
                self._writer.add_scalar(name, value, step)
        if self._progress is not None:
            # An iteration in which no episode ended has no return: keep showing the last one.
            self._shown.update({key: metrics[key] for _, key, _ in self.summary if key in metrics})
            steps = f"{_count(step)}/{self._total}"
            # Rich cuts a line too wide for the console with "…" in every column: show the leading
            # figures that fit instead (at 80 columns SPS and return; all of them from ~100).
            room, stats = self.console.width - FIXED_WIDTH - len(steps), ""
            for label, key, spec in self.summary:
                more = f"{stats}{' | ' if stats else ''}{label} {_fmt(self._shown.get(key), spec)}"
                if len(more) > room:
                    break
                stats = more
            self._progress.update(self._task, completed=step, steps=steps, stats=stats)

    def message(self, text: str) -> None:
        """A line for the user (warnings, summary), printed above the progress bar. Piped or
        redirected, it stays one line (rich would wrap it at 80 columns) for grep and log readers."""
        self.console.print(text, highlight=False, soft_wrap=not self.console.is_terminal)

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
