"""Reading prompts and preference pairs with the ``datasets`` library, and drawing batches from
them reproducibly.

A source is a local file (.jsonl/.json, .parquet, .csv), a folder of such files, a folder written
by ``Dataset.save_to_disk``, or a dataset name on the Hugging Face hub. Which split and columns
are read is set by :class:`~fastppo.rlhf.config.DataConfig`. Conversational rows (lists of
``{"role", "content"}`` messages) are rendered to text with the tokenizer's chat template.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard, cast

import torch

from fastppo.errors import FastPPOError
from fastppo.rlhf.config import DataConfig, PreferenceDataConfig, looks_like_path

if TYPE_CHECKING:
    import datasets
    from transformers import PreTrainedTokenizerBase

FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
LOCAL_SOURCES = "a local .jsonl/.json/.parquet/.csv file, a folder of them, or a folder written by Dataset.save_to_disk"
SAVED_DATASET_FILES = ("dataset_info.json", "dataset_dict.json", "state.json")


@dataclass(frozen=True)
class PreferencePair:
    prompt: str
    chosen: str
    rejected: str


def _blank(path: Path) -> bool:
    with path.open(encoding="utf-8", errors="replace") as lines:
        return not any(line.strip() for line in lines)


def load_table(source: str | Path, split: str, flag: str) -> datasets.Dataset:
    """``split`` of ``source`` as a ``datasets.Dataset``; a single file is read whole."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)  # its failures become our one-line errors
    source = str(source)
    path = Path(source).expanduser()
    try:
        if path.is_dir() and any((path / name).is_file() for name in SAVED_DATASET_FILES):
            table = datasets.load_from_disk(str(path))
            if isinstance(table, datasets.DatasetDict):
                if split not in table:
                    raise FastPPOError(
                        f"{flag} {source!r} has no split {split!r}: pass --split with one of {', '.join(table)}"
                    )
                table = table[split]
        elif path.is_dir():
            table = datasets.load_dataset(str(path), split=split)
        elif path.is_file():
            builder = FILE_BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise FastPPOError(f"{flag} {source!r} has an unknown file type: pass {LOCAL_SOURCES}")
            if builder != "parquet" and _blank(path):
                raise FastPPOError(f"{flag} file {source!r} is empty: add at least one row")
            table = datasets.load_dataset(builder, data_files={split: str(path)}, split=split)
        elif looks_like_path(source) or path.suffix.lower() in FILE_BUILDERS:
            raise FastPPOError(f"{flag} {source!r} does not exist: pass {LOCAL_SOURCES}, or a hub dataset name")
        else:
            table = datasets.load_dataset(source, split=split)
    except ConnectionError as exc:
        raise FastPPOError(
            f"{flag} {source!r} is no local file or folder, and the Hugging Face hub cannot be reached "
            f"(offline?): pass {LOCAL_SOURCES}"
        ) from exc
    except datasets.exceptions.DatasetNotFoundError as exc:
        raise FastPPOError(
            f"{flag} {source!r} is neither a local path nor a dataset on the hub: pass {LOCAL_SOURCES}, or a hub "
            "dataset name"
        ) from exc
    except (ValueError, OSError, datasets.exceptions.DatasetsError) as exc:
        # A parse error is wrapped in a generic DatasetGenerationError; its cause names the row.
        reason = str(exc.__cause__ or exc).strip().splitlines()[0]
        raise FastPPOError(f"cannot read {flag} {source!r} ({reason}): pass {LOCAL_SOURCES}") from exc
    if len(table) == 0:
        raise FastPPOError(f"{flag} {source!r} is empty: add at least one row")
    return table


def _column(table: datasets.Dataset, name: str, source: str, flag: str, column_flag: str) -> list[object]:
    if name not in table.column_names:
        raise FastPPOError(
            f"{flag} {source!r} has no column {name!r} (it has {', '.join(table.column_names)}): name the column "
            f"with {column_flag}"
        )
    return list(table[name])


def _is_chat(value: object) -> TypeGuard[list[dict[str, str]]]:
    return isinstance(value, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
    )


def _describe(value: object) -> str:
    return "missing" if value is None else f"of type {type(value).__name__}"


class TextRenderer:
    """Cells to text: strings as they are; with a chat template, messages rendered by it (a string
    is first made one message of the role it plays: the user's prompt, the assistant's answer)."""

    def __init__(self, source: str, flag: str, tokenizer: PreTrainedTokenizerBase | None = None) -> None:
        self.source, self.flag, self.tokenizer = source, flag, tokenizer
        if tokenizer is not None and not tokenizer.chat_template:
            raise FastPPOError(
                f"--chat-template: the tokenizer of {tokenizer.name_or_path!r} has no chat template: drop "
                "--chat-template, or use a tokenizer that has one"
            )

    def _where(self, row: int, column: str) -> str:
        return f"{self.flag} {self.source!r}, row {row + 1}, column {column!r}"

    def _messages(self, value: object, role: str, row: int, column: str) -> list[dict[str, str]]:
        if isinstance(value, str):
            return [{"role": role, "content": value}]
        if _is_chat(value):
            return value
        raise FastPPOError(
            f"{self._where(row, column)} is {_describe(value)}: expected text or a list of {{'role', 'content'}} "
            "messages"
        )

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool, row: int, column: str) -> str:
        from jinja2 import TemplateError

        assert self.tokenizer is not None  # only text() and completion() render, and only with a tokenizer
        try:
            # tokenize=False returns the text; transformers' annotation covers every mode at once
            text = cast(
                str,
                self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt),
            )
        except TemplateError as exc:
            raise FastPPOError(f"{self._where(row, column)}: the chat template refused these messages ({exc})") from exc
        # A template that writes the BOS token itself, for a tokenizer that adds one when encoding:
        # drop it here, or the prompt would start with two.
        bos = self.tokenizer.bos_token
        if bos and text.startswith(bos) and self.tokenizer("")["input_ids"][:1] == [self.tokenizer.bos_token_id]:
            text = text[len(bos) :]
        return text

    def text(self, value: object, row: int, column: str) -> str:
        if isinstance(value, str) and self.tokenizer is None:
            return value
        if self.tokenizer is None:
            if _is_chat(value):
                raise FastPPOError(
                    f"{self._where(row, column)} holds chat messages: pass --chat-template to render them with "
                    "the tokenizer's chat template"
                )
            raise FastPPOError(f"{self._where(row, column)} is {_describe(value)}: expected text")
        return self._render(self._messages(value, "user", row, column), True, row, column)

    def completion(self, prompt: object, value: object, row: int, column: str) -> str:
        """The completion's text: the conversation rendered with it, minus the rendered prompt."""
        if self.tokenizer is None:
            return self.text(value, row, column)
        prompt_text = self.text(prompt, row, column)
        full = self._render(
            self._messages(prompt, "user", row, column) + self._messages(value, "assistant", row, column),
            False,
            row,
            column,
        )
        if not full.startswith(prompt_text):
            raise FastPPOError(
                f"{self._where(row, column)}: the chat template renders the prompt differently when an answer "
                "follows, so the answer cannot be cut from it"
            )
        return full[len(prompt_text) :]


@dataclass(frozen=True)
class PromptColumn:
    """The prompts as their data holds them (text or chat messages), to render with a tokenizer."""

    values: list[object]
    source: str
    flag: str
    column: str

    def renderer(self, tokenizer: PreTrainedTokenizerBase | None = None) -> TextRenderer:
        return TextRenderer(self.source, self.flag, tokenizer)

    def render(self, tokenizer: PreTrainedTokenizerBase | None = None) -> list[str]:
        """Every prompt as text; with ``tokenizer``, rendered by its chat template."""
        renderer = self.renderer(tokenizer)
        return [renderer.text(value, row, self.column) for row, value in enumerate(self.values)]


def read_prompt_column(source: str | Path, flag: str = "--prompts", data: DataConfig | None = None) -> PromptColumn:
    """The prompt column of ``source`` (``flag``: the option that named it, for errors)."""
    data = data or DataConfig()
    table = load_table(source, data.split, flag)
    return PromptColumn(
        _column(table, data.prompt_column, str(source), flag, "--prompt-column"), str(source), flag, data.prompt_column
    )


def read_prompts(
    source: str | Path,
    flag: str = "--prompts",
    data: DataConfig | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> list[str]:
    """The prompts of ``source``, rendered with ``tokenizer``'s chat template when ``data.chat_template``."""
    data = data or DataConfig()
    return read_prompt_column(source, flag, data).render(tokenizer if data.chat_template else None)


class Conversations:
    """With ``--chat-template``: the text a reward model trained by ``fastppo reward-model
    --chat-template`` scores for (rendered prompt, completion). The prompt's messages and the
    completion as the assistant's answer are rendered by the reward model's template exactly as
    :func:`read_preferences` renders a pair (``text`` + ``completion``), so a sampled completion,
    whose text comes without special tokens, ends in the template's end token as every answer the
    reward model was trained on."""

    def __init__(self, columns: list[PromptColumn], rendered: list[list[str]]) -> None:
        self.cells = {text: (column, row) for column, texts in zip(columns, rendered) for row, text in enumerate(texts)}

    def texts(self, tokenizer: PreTrainedTokenizerBase, prompts: list[str], completions: list[str]) -> list[str]:
        texts = []
        for prompt, completion in zip(prompts, completions):
            column, row = self.cells[prompt]
            renderer, value = column.renderer(tokenizer), column.values[row]
            texts.append(
                renderer.text(value, row, column.column) + renderer.completion(value, completion, row, column.column)
            )
        return texts


def read_preferences(
    source: str | Path,
    data: PreferenceDataConfig | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    flag: str = "--data",
) -> list[PreferencePair]:
    """(prompt, chosen, rejected) triples of ``source``; with ``data.chat_template`` the prompt is
    rendered with a generation prompt and each completion is the text the template adds after it."""
    data = data or PreferenceDataConfig()
    table = load_table(source, data.split, flag)
    renderer = TextRenderer(str(source), flag, tokenizer if data.chat_template else None)
    columns = [
        _column(table, name, str(source), flag, column_flag)
        for name, column_flag in (
            (data.prompt_column, "--prompt-column"),
            (data.chosen_column, "--chosen-column"),
            (data.rejected_column, "--rejected-column"),
        )
    ]
    return [
        PreferencePair(
            renderer.text(prompt, row, data.prompt_column),
            renderer.completion(prompt, chosen, row, data.chosen_column),
            renderer.completion(prompt, rejected, row, data.rejected_column),
        )
        for row, (prompt, chosen, rejected) in enumerate(zip(*columns))
    ]


def batch_indices(num_items: int, batch_size: int, step: int, seed: int) -> list[int]:
    """Indices for (1-based) ``step``: consecutive slices of a shuffled order that is reshuffled
    every pass over the data. A pure function of its arguments, so a resumed run draws exactly
    the batches it would have drawn."""
    indices = []
    orders: dict[int, list[int]] = {}
    for position in range((step - 1) * batch_size, step * batch_size):
        data_epoch, i = divmod(position, num_items)
        if data_epoch not in orders:
            orders[data_epoch] = torch.randperm(
                num_items, generator=torch.Generator().manual_seed(seed * 100_003 + data_epoch)
            ).tolist()
        indices.append(orders[data_epoch][i])
    return indices
