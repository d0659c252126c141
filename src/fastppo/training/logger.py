"""One small logger with three backends: TensorBoard, metrics.jsonl and a live console view.

Metric names follow CleanRL's (charts/episodic_return, losses/approx_kl, ...) so that fastppo and
CleanRL runs line up in one TensorBoard.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from fastppo.errors import FastPPOError, install_extra
from fastppo.files.run_folder import TENSORBOARD_EVENTS

if TYPE_CHECKING:  # an optional extra, imported when --report-to wandb asks for it
    import wandb

SAMPLES_FILE = "samples.jsonl"
WANDB_ID_FILE = "wandb-run-id"


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


GROUP_RETURN = "charts/episodic_return/"
"""A multi-agent run's group returns: charts/episodic_return/<group>, the sum of its agents' returns."""

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
        wandb_project: str | None = None,
    ):
        """``purge_step``: on resume, TensorBoard drops events logged at this step or later by the
        interrupted process, so the curves continue without duplicates; the progress bar starts
        there too. ``summary`` picks the metrics the progress bar shows. ``wandb_project``: also
        log to this Weights & Biases project, in a run named after ``run_dir``."""
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
                # A fresh run over the events of one that stopped before its first checkpoint
                # (fastppo.files.run_folder.stopped_before_first_checkpoint): TensorBoard drops those.
                restart = purge_step is None and any(run_dir.glob(TENSORBOARD_EVENTS))
                self._writer = SummaryWriter(
                    str(run_dir), purge_step=0 if restart else purge_step, max_queue=1000, flush_secs=10
                )
                if config is not None and purge_step is None:
                    rows = "\n".join(f"|{k}|{v}|" for k, v in _flatten(config).items())
                    self._writer.add_text("hyperparameters", f"|param|value|\n|-|-|\n{rows}")
        self._wandb = _start_wandb(wandb_project, run_dir, config) if wandb_project is not None else None
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
            self._task = self._progress.add_task(
                "train", total=total_steps, completed=start, steps=f"{_count(start)}/{self._total}", stats=""
            )
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
        if self._wandb is not None:
            self._wandb.log(metrics, step=step)
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

    def log_samples(self, step: int, name: str, rows: list[dict[str, Any]]) -> None:
        """A table of examples (e.g. prompt, completion, reward) at ``step``: one JSON line per row in
        samples.jsonl (with ``global_step`` and ``table``: ``name``), a markdown table in TensorBoard's
        text tab under ``samples/{name}``, a wandb.Table in W&B."""
        if not rows or self.run_dir is None:
            return
        with (self.run_dir / SAMPLES_FILE).open("a", encoding="utf-8") as f:
            f.writelines(json.dumps({"global_step": step, "table": name, **row}) + "\n" for row in rows)
        columns = list(rows[0])
        if self._writer is not None:
            lines = [f"|{'|'.join(columns)}|", f"|{'|'.join('-' for _ in columns)}|"]
            lines += [f"|{'|'.join(_markdown_cell(row[c]) for c in columns)}|" for row in rows]
            self._writer.add_text(f"samples/{name}", "\n".join(lines), step)
        if self._wandb is not None:
            import wandb

            # the names copied into the list[str | int] wandb.Table asks for
            table = wandb.Table(columns=list(columns), data=[[row[c] for c in columns] for row in rows])
            self._wandb.log({f"samples/{name}": table}, step=step)

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
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
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


def _markdown_cell(value: Any) -> str:
    """A value as one cell of a markdown table: pipes escaped, line breaks kept as <br>."""
    text = format(value, ".4g") if isinstance(value, float) else str(value)
    return text.replace("|", "\\|").replace("\n", "<br>")


def import_wandb() -> ModuleType:
    """The wandb module, or a one-line error saying how to install it."""
    try:
        import wandb
    except ImportError as exc:
        raise FastPPOError(f"--report-to wandb needs wandb, which is not installed: {install_extra('wandb')}") from exc
    return wandb


def _start_wandb(project: str, run_dir: Path | None, config: dict[str, Any] | None) -> wandb.Run:
    """A W&B run named after ``run_dir``; its id is kept there so a resumed run continues the same W&B run."""
    wandb = import_wandb()
    if run_dir is None:
        kwargs = {}
    else:
        id_file = run_dir / WANDB_ID_FILE
        if not id_file.is_file():
            id_file.write_text(uuid.uuid4().hex[:12])
        kwargs = {
            "name": run_dir.resolve().name,
            "id": id_file.read_text().strip(),
            "resume": "allow",
            "dir": str(run_dir),
        }
    try:
        return wandb.init(project=project, config=config, **kwargs)
    except wandb.errors.Error as exc:  # no API key, refused login, unreachable server...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FastPPOError(
            f"--report-to wandb: W&B could not start the run ({reason}): run 'wandb login', or set WANDB_MODE=offline "
            "to log locally and wandb sync later"
        ) from exc
