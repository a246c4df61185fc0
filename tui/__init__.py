"""verl-tui: a terminal cockpit for multi-node verl RL training on Ray."""

__version__ = "0.1.0"
