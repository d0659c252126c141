"""Run folders on disk: the files a run writes, and writing them safely (one-line errors, no overwrite)."""
