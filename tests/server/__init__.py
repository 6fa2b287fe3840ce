"""The server package: settings, the app factory, batches; one folder per layer below."""
