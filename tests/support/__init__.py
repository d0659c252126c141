"""What the tests share: fake envs and games, fixtures on disk, and helpers used by more than one test module."""
