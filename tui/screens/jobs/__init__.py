"""The Jobs screen (screen.py) and its parts: the job table, the queue rows, comparison marks,
the supervisor's heal line."""
