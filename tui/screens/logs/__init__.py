"""Log screens: a job's log (with its metrics and archive) and a node's log files (with grep)."""
