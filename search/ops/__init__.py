"""The operator's side of the service: readiness and data-dir checks (``readiness``), metrics (``metrics``), request
logs (``requestlog``), backups (``backup``). The API serves them through ``search.api.operations`` and the
middleware installed by ``install``; the CLI through ``search.cli.ops`` (``flysift doctor``, ``flysift backup``).
Nothing here knows a route: middleware reads the matched route from the request, so pages added later (the curator
workbench) are measured and logged like every API route.
"""
