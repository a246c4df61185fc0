"""Debugging a Ray worker from the cockpit: a DAP client for Ray's post-mortem debugpy port, a
console for the legacy remote pdb, and VS Code launch.json for attaching an editor instead.
No UI here: the screens sit on top of this API."""
