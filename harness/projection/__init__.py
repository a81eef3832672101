"""Projection without a run: the cost model (pure, torch-free) and the `harness project` command."""
