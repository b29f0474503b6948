"""`python -m onnxformer ...`: the same as the `onnxformer` command."""

from onnxformer.cli.main import app

app(prog_name="onnxformer")
