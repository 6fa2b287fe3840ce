"""The load benchmark of Petstore, run by ``make bench`` (see bench/README.md).

Modules, in the order a run uses them: ``wrk`` (install and drive wrk), ``seed`` (a
fresh database with N animals), ``servers`` (the service and the baseline, pinned),
``capture`` (real answers for the baseline, deep cursors for S5), ``scenarios``
(S1-S6), ``report`` (medians, ratios, the Markdown table), ``run`` (the command).
``baseline`` is the raw ASGI app the service is compared with.
"""
