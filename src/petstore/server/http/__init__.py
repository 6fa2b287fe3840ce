"""HTTP: the ASGI pipeline (:mod:`.pipeline`), the route table (:mod:`.routes`), one
request and its answer (:mod:`.exchange`), request text to values (:mod:`.parsing`),
the interface's operations (:mod:`.operations`) and the OpenAPI pages (:mod:`.docs`).

No SQL and no database driver here: the operations call :mod:`petstore.server.rules`.
"""
