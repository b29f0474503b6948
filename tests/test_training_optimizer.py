"""AdamW decays only the matrices of linear maps; training imports no export code (and so no onnx)."""

import subprocess
import sys

import pytest
from torch import nn

from onnxformer.builder.families import FAMILIES
from onnxformer.builder.training.optimizer import make_optimizer, parameter_groups

TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "vocab_size": 50}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_parameter_is_in_exactly_one_group_and_only_linear_weights_decay(family: str) -> None:
    spec = FAMILIES[family]
    model = spec.model(spec.config.preset("tiny", **TINY))
    decay, no_decay = parameter_groups(model)
    ids = [id(p) for p in decay + no_decay]
    assert len(ids) == len(set(ids)), "a parameter is in both groups (or twice in one)"
    assert set(ids) == {id(p) for p in model.parameters()}, "a parameter is in no group"
    names = {id(p): name for name, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay}
    kept = {names[id(p)] for p in no_decay}
    assert decayed and all(p.dim() == 2 for p in decay)
    assert not any("norm" in name or name.endswith(".bias") for name in decayed), sorted(decayed)
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    assert embeddings and embeddings <= {id(p) for p in no_decay}
    assert any(name.endswith(".bias") for name in kept) and any("norm" in name for name in kept)
    print(f"{family}: {len(decayed)} decayed, {len(kept)} not decayed")

    optimizer = make_optimizer(model, learning_rate=1e-3, weight_decay=0.1)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]


def test_gpt_tied_lm_head_is_not_decayed() -> None:
    spec = FAMILIES["gpt"]
    model = spec.model(spec.config.preset("tiny", **TINY))
    _, no_decay = parameter_groups(model)
    assert any(p is model.embeddings.token.weight for p in no_decay)


def test_training_imports_neither_the_export_package_nor_onnx() -> None:
    code = (
        "import sys, onnxformer.builder.training, onnxformer.builder.training.trainer;"
        "bad = [m for m in sys.modules if m == 'onnx' or m.startswith(('onnx.', 'onnxformer.builder.export',"
        " 'onnxscript', 'onnxruntime'))];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
