"""HTTP: the ASGI pipeline (:mod:`.pipeline`), the route table (:mod:`.routes`), the
request as an immutable view and the answer being built (:mod:`.exchange`), reading
a request (:mod:`.reading`), request text to values (:mod:`.parsing`), the
interface's operations (:mod:`.operations`) and the OpenAPI pages (:mod:`.docs`).

No SQL and no database driver here: the operations call :mod:`petstore.server.rules`.
"""
