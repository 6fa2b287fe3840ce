"""The service as a process: ``petstore serve`` started for real (workers, stops,
crashes, slow clients, connections, HTTP/2)."""
