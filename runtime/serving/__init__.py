"""Scaling inference out: batch inference (a plain loop or Ray Data), an HTTP/JSON server (uvicorn or Ray
Serve) and a Triton Inference Server model repository, all on one export folder.

Torch-free like the rest of the runtime, and built only on its public API (`onnxformer.runtime.load` and
the three model classes). Ray, Starlette and uvicorn are optional: they are imported by the functions that
need them, which say which extra to install when they are missing.

    tasks.py     what each model class does to a column of texts (embed / generate / seq2seq), with the
                 GenerationOptions fields of its task
    batch.py     the map_batches callable, the plain loop, the Ray Data run
    jsonl.py     reading JSONL input with line numbers, writing output atomically
    app.py       the ASGI application (Starlette): the task routes, /health, /info, /metrics
    checks.py    the task routes' request checks and limits
    openai_api.py, openai_routes.py   the OpenAI API: request and answer shapes, handlers
    engine.py    the model behind the routes, through the batcher; scheduler.py the batcher itself
    http.py      what the routes share: bounded bodies, status codes, disconnects
    metrics.py   Prometheus metrics
    ray_serve.py the same application deployed with Ray Serve
    triton.py    config.pbtxt model repositories for the encoder graphs
"""

from onnxformer.runtime.generation_options import GenerationOptions
from onnxformer.runtime.serving.tasks import Task, task_for

__all__ = ["GenerationOptions", "Task", "task_for"]
