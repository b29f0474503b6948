"""The Llama-style decoder (the gpt family with the llama presets) trains from scratch like the others,
its checkpoint keeps the options, and BERT's training refuses a config without the heads it trains."""

from pathlib import Path

import pytest
import torch

from onnxformer.builder.families import GPTConfig
from onnxformer.builder.training import TrainOptions, train
from onnxformer.builder.training.checkpoint import load_checkpoint
from onnxformer.runtime.errors import ConfigError


def test_llama_preset_is_the_llama_options() -> None:
    config = GPTConfig.preset("llama-tiny")
    block = config.block
    assert (block.norm.kind, config.position, block.ffn.activation, block.ffn.gated) == (
        "rms",
        "rotary",
        "silu",
        True,
    )
    assert (block.attention.qkv_bias, block.attention.out_bias, block.ffn.bias) == (False, False, False)
    assert block.attention.n_kv_heads == 2 and config.n_heads == 4 and not config.tie_embeddings


def test_llama_preset_trains_from_scratch(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    result = train(
        tmp_path / "llama",
        TrainOptions("gpt", preset="llama-tiny", steps=120, batch_size=16, eval_every=40, quality_samples=2),
    )
    history = result.metrics
    loaded = load_checkpoint(result.out)
    config = loaded.model.config
    block = config.block
    assert (block.norm.kind, block.attention.n_kv_heads, block.ffn.gated, config.tie_embeddings) == (
        "rms",
        2,
        True,
        False,
    )
    names = set(loaded.model.state_dict())
    assert not any(name.endswith(".bias") for name in names), "the Llama options have no biases"
    assert "decoder.blocks.0.ffn.gate.weight" in names
    k_proj = loaded.model.state_dict()["decoder.blocks.0.self_attn.k_proj.weight"]
    assert k_proj.shape == (2 * 32, 128), "keys and values have n_kv_heads = 2 heads of 32"
    first, last = result.best["val_loss"], history["val_loss"]
    print(f"llama-tiny, 120 steps: val loss {last:.2f} (best {first:.2f}); metrics {history}")
    # An untrained model over ~300 tokens sits near ln(300) = 5.7; learning brings it well below.
    assert last < 4.0


def test_bert_training_needs_its_heads() -> None:
    with pytest.raises(ConfigError, match="classifier"):
        TrainOptions("bert", model_overrides={"classifier": False}).validated()
