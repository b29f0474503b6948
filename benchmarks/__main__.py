"""`python -m benchmarks` from the checkout: the same command as `onnxformer bench`."""

import typer

from onnxformer.cli.bench import bench_command

if __name__ == "__main__":
    typer.run(bench_command)
