"""Where things are: the repository's root (docs, examples, benchmarks) and this folder of shared test files."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parents[1]
