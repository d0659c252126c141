"""Many runs: stacked or parallel seeds, hyperparameter sweeps, reports and plots across run folders."""
