"""Performance measurements of loop_agents (not tests): run ``python -m benchmarks``."""
