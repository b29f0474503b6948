"""The HTTP application of `app.py`, deployed unchanged with Ray Serve: each replica loads the export
folder once and builds the same ASGI app (`serve.ingress` with a late-bound app), so a cluster serves the
endpoints, limits and errors of `onnxformer serve` with N replicas behind Ray's HTTP proxy."""

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from onnxformer.runtime.serving.app import Limits, ServerOptions, check_port, create_app
from onnxformer.runtime.serving.batch import connect
from onnxformer.runtime.serving.tasks import require

APP_NAME = "onnxformer"


class _Replica:
    """One Ray Serve replica: the folder is loaded when Serve builds the app on the replica."""

    def __init__(self, folder: str, options: ServerOptions, threads: int | None) -> None:
        self._folder, self._options, self._threads = folder, options, threads

    def __serve_build_asgi_app__(self) -> Any:
        from onnxformer.runtime.loader import load

        return create_app(load(self._folder, threads=self._threads), options=self._options)


def deployment(
    folder: str | os.PathLike[str],
    *,
    replicas: int = 1,
    limits: Limits | None = None,
    options: ServerOptions | None = None,
    threads: int | None = 1,
) -> Any:
    """The bound Ray Serve application for `serve.run` (one CPU per replica)."""
    require("ray", "ray")
    from ray import serve

    ingress = serve.ingress()(_Replica)
    # Ray's decorator form, `deployment(**options)(cls)`: its annotations type that one right.
    deploy = serve.deployment(name=APP_NAME, num_replicas=replicas, ray_actor_options={"num_cpus": 1})
    options = options or ServerOptions(model_name=Path(folder).resolve().name)
    if limits is not None:
        options = replace(options, limits=limits)
    return deploy(ingress).bind(str(Path(folder).resolve()), options, threads)


def serve_on_ray(
    folder: str | os.PathLike[str],
    *,
    address: str = "auto",
    host: str = "127.0.0.1",
    port: int = 8000,
    replicas: int = 1,
    limits: Limits | None = None,
    options: ServerOptions | None = None,
    threads: int | None = 1,
    blocking: bool = True,
) -> None:
    """Start Serve's HTTP proxy on host:port and run the folder's app with `replicas` replicas; with
    `blocking` (the command) until interrupted, then the application is deleted."""
    check_port(port)
    ray, _ = connect(address)
    from ray import serve

    serve.start(http_options={"host": host, "port": port})
    app = deployment(folder, replicas=replicas, limits=limits, options=options, threads=threads)
    serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    if not blocking:
        return
    try:
        import time

        while True:
            time.sleep(3600)
    finally:
        serve.delete(APP_NAME)
        ray.shutdown()
