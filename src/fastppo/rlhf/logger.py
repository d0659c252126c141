"""Metrics to metrics.jsonl and TensorBoard, and a live progress bar.

Kept inside rlhf/ until a shared fastppo logger exists; the metric names are the shared ones
(``losses/approx_kl``...) plus ``rlhf/...`` for what only language models have.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from torch.utils.tensorboard import SummaryWriter


class RunLogger:
    """Append-only: a resumed run continues the same metrics.jsonl and TensorBoard folder."""

    def __init__(self, output_dir: Path, total_steps: int, start_step: int, summary_keys: tuple[str, ...], progress: bool = True):
        output_dir.mkdir(parents=True, exist_ok=True)
        self.summary_keys = summary_keys
        self._jsonl = (output_dir / "metrics.jsonl").open("a", encoding="utf-8")
        self._writer = SummaryWriter(str(output_dir / "tensorboard"))
        self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), TextColumn("{task.fields[summary]}"), disable=not progress)
        self._task = self._progress.add_task("fastppo", total=total_steps, completed=start_step, summary="")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
        self._jsonl.flush()
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)
        summary = "  ".join(f"{key.split('/')[-1]}={metrics[key]:.3g}" for key in self.summary_keys if key in metrics)
        self._progress.update(self._task, completed=step, summary=summary)

    def __enter__(self) -> RunLogger:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._progress.stop()
        self._writer.close()
        self._jsonl.close()
