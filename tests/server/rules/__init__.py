"""The rules layer (``server.rules``): keys, authentication, scopes, rate limits,
idempotency, the caches of the rules."""
