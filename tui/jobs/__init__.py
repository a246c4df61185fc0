"""Jobs: profiles, verl config schema and rules, submission, history."""
