"""The rules of the interface and of its decisions (docs/decisions.md, D1-D28),
without HTTP and without a driver:
pets (D5-D8, D14), keys (D13, D21-D22), auth, idempotency (D16), pagination (D9) and
rate limits (D15). They call :mod:`petstore.server.store` and raise
:mod:`petstore.server.errors`; the HTTP layer turns those into answers.
"""
