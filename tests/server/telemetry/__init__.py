"""Telemetry (``server.telemetry``): logs, metrics, traces."""
