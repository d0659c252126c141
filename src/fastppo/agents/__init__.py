"""A trained agent: its policy, statistics and spaces as saved in a run folder; loading, acting,
evaluating, recording and exporting it."""
