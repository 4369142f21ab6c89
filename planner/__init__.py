"""Capacity planner: joins sizing, the simulation snapshot and kernel results into users per GPU,
tokens/s and time per output token. CLI: ``python -m planner`` (alias ``python -m sizing plan``)."""
