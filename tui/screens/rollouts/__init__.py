"""The Rollouts screen (screen.py) and its one-sample and two-step views (sample.py)."""
