"""Prompts and preference pairs read with the datasets library: every source format, column
mapping, splits, chat templates, and the one-line errors of bad sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fastppo.errors import FastPPOError
from fastppo.rlhf.config import DataConfig, PreferenceDataConfig
from fastppo.rlhf.data import PreferencePair, read_preferences, read_prompts
from tests.support.tiny_lm import build_tokenizer, run_cli

datasets = pytest.importorskip("datasets")

ROWS = [
    {"question": "hi", "good": "aa", "bad": "zz", "id": 1},
    {"question": "the cat", "good": "sat", "bad": "ran", "id": 2},
]
COLUMNS = PreferenceDataConfig(prompt_column="question", chosen_column="good", rejected_column="bad")
EXPECTED = [PreferencePair("hi", "aa", "zz"), PreferencePair("the cat", "sat", "ran")]
CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def write_source(kind: str, folder):
    table = datasets.Dataset.from_list(ROWS)
    if kind == "jsonl":
        path = folder / "pairs.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    elif kind == "json":  # a JSON array, not JSON lines
        path = folder / "pairs.json"
        path.write_text(json.dumps(ROWS))
    elif kind == "parquet":
        path = folder / "pairs.parquet"
        table.to_parquet(str(path))
    elif kind == "csv":
        path = folder / "pairs.csv"
        table.to_csv(str(path), index=False)
    elif kind == "folder of files":
        path = folder / "files"
        path.mkdir()
        table.to_parquet(str(path / "train-0.parquet"))
    else:  # save_to_disk of a DatasetDict: the split is picked by --split
        path = folder / "saved"
        datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:1]), "test": table}).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet", "csv", "folder of files", "save_to_disk"])
def test_every_source_format_with_column_mapping(tmp_path, kind) -> None:
    source = write_source(kind, tmp_path)
    split = "test" if kind == "save_to_disk" else "train"
    columns = PreferenceDataConfig(**{**vars(COLUMNS), "split": split})
    assert read_preferences(source, columns) == EXPECTED
    assert read_prompts(source, data=DataConfig(split=split, prompt_column="question")) == ["hi", "the cat"]


def test_a_single_file_is_read_whole_whatever_the_split(tmp_path) -> None:
    assert read_prompts(
        write_source("jsonl", tmp_path), data=DataConfig(split="validation", prompt_column="question")
    ) == ["hi", "the cat"]


def test_bad_sources_and_columns_are_one_line_errors(tmp_path) -> None:
    source = write_source("parquet", tmp_path)
    with pytest.raises(
        FastPPOError,
        match=r"has no column 'prompt' \(it has question, good, bad, id\): name the column with --prompt-column",
    ):
        read_prompts(source)
    with pytest.raises(FastPPOError, match="has no column 'chosen'.*--chosen-column"):
        read_preferences(source, PreferenceDataConfig(prompt_column="question"))
    with pytest.raises(FastPPOError, match=r"row 1, column 'id' is of type int: expected text"):
        read_prompts(source, data=DataConfig(prompt_column="id"))
    with pytest.raises(FastPPOError, match="has no split 'validation': pass --split with one of train, test"):
        read_prompts(
            write_source("save_to_disk", tmp_path), data=DataConfig(split="validation", prompt_column="question")
        )
    with pytest.raises(FastPPOError, match="missing.parquet' does not exist"):
        read_prompts(tmp_path / "missing.parquet")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(FastPPOError, match="unknown file type"):
        read_prompts(tmp_path / "notes.txt")
    (tmp_path / "broken.jsonl").write_text('{"prompt": "a"}\n{"prompt": \n')
    with pytest.raises(FastPPOError, match=r"cannot read --prompts .*broken.jsonl' \(JSON parse error"):
        read_prompts(tmp_path / "broken.jsonl")


def chat_tokenizer():
    tokenizer = build_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def test_conversational_prompts_are_rendered_with_the_chat_template(tmp_path) -> None:
    path = tmp_path / "chat.jsonl"
    rows = [
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]},
        {"messages": "plain text"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows[:1]))
    data = DataConfig(prompt_column="messages", chat_template=True)
    assert read_prompts(path, data=data, tokenizer=chat_tokenizer()) == ["<system>be brief<user>hi<assistant>"]
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"prompt": "hi"}) + "\n")
    assert read_prompts(plain, data=DataConfig(chat_template=True), tokenizer=chat_tokenizer()) == [
        "<user>hi<assistant>"
    ], "text is one user message"
    with pytest.raises(FastPPOError, match="row 1, column 'messages' holds chat messages: pass --chat-template"):
        read_prompts(path, data=DataConfig(prompt_column="messages"))
    with pytest.raises(FastPPOError, match="has no chat template: drop --chat-template"):
        read_prompts(path, data=data, tokenizer=build_tokenizer())


def test_conversational_pairs_keep_what_the_template_adds_after_the_prompt(tmp_path) -> None:
    path = tmp_path / "pairs.jsonl"
    row = {
        "prompt": [{"role": "user", "content": "hi"}],
        "chosen": [{"role": "assistant", "content": "hello"}],
        "rejected": "go away",
    }
    path.write_text(json.dumps(row) + "\n")
    pairs = read_preferences(path, PreferenceDataConfig(chat_template=True), chat_tokenizer())
    assert pairs == [PreferencePair("<user>hi<assistant>", "hello", "go away")]


def test_cli_reads_parquet_with_column_flags(tiny_model, tmp_path) -> None:
    source = write_source("parquet", tmp_path)
    assert (
        run_cli(
            [
                "dpo",
                "--model",
                str(tiny_model),
                "--data",
                str(source),
                "--prompt-column",
                "question",
                "--chosen-column",
                "good",
                "--rejected-column",
                "bad",
                "--batch-size",
                "2",
                "--output-dir",
                str(tmp_path / "dpo"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert len((tmp_path / "dpo" / "metrics.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize("command, flag", [("rlhf", "--prompts"), ("dpo", "--data")])
def test_a_hub_name_offline_is_a_one_line_error(tiny_model, tmp_path, command, flag) -> None:
    argv = [sys.executable, "-m", "fastppo", command, "--model", str(tiny_model), flag, "someone/some-dataset"] + (
        ["--reward", "x:y"] if command == "rlhf" else []
    )
    result = subprocess.run(
        argv, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=tmp_path, timeout=120
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"fastppo: error: {flag} 'someone/some-dataset' is no local file or folder, and the Hugging Face hub "
        "cannot be reached (offline?): "
        "pass a local .jsonl/.json/.parquet/.csv file, a folder of them, or a folder written by Dataset.save_to_disk"
    ]
