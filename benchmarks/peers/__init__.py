"""`onnxformer bench --peers`: the runtime side by side with Optimum, sentence-transformers,
onnxruntime-genai and transformers, each tool in a worker process in its own environment (run.py)."""
