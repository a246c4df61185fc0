"""The cockpit's data for other tools: the Prometheus endpoint (prometheus.py)."""
