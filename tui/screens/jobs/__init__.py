"""The Jobs screen (screen.py: jobs on the head, queued jobs on top, marks for comparison) and
what its rows show: the job table (view.py), queued rows (queue.py), retry chains (heal.py)."""
