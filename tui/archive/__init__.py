"""The run archive: every followed job's log, metric series, status, timings, config and GPU
use, kept under the state dir across Ray restarts (store), written while a log is read
(writer, follow), and compared (compare)."""
