"""The job form (JobFormScreen, screen.py) and its collaborators: the cluster it checks
against, its draft, its errors, the queue switch and sweeps, resume, retries, the submission."""
