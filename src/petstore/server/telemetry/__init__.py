"""What the service tells its operators: logs and access lines (:mod:`.logs`),
Prometheus metrics (:mod:`.metrics`) and OpenTelemetry traces (:mod:`.tracing`).
Imports nothing else of the server.
"""
