"""verl's rollout dumps (trainer.rollout_data_dir / validation_data_dir): read lazily over SSH
(reader.py), parsed and flagged (samples.py). Used by `verl-tui rollouts` and the Rollouts
screen."""
