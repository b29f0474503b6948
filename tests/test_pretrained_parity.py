"""Proof of the Hugging Face import: the model `from_pretrained(folder)` returns against transformers' own
eager model loaded from the same folder (tiny random-weight models, tests/hf_models.py, fp32).

    outputs     BertModel (hidden states, pooler), BertForMaskedLM, BertForSequenceClassification,
                GPT2LMHeadModel, T5 v1.0 (relu, tied) and v1.1 (gated-gelu, untied, 2/3 layers),
                Llama (4 heads, 2 KV heads, rope_theta 5e5) tied and untied, Qwen2 (q/k/v biases, none on
                the output projection): batch 1 and 3 (padded),
                lengths 1, 7 and 64, the first step and cached steps; max abs diff <= 1e-4 on real tokens
    generation  greedy tokens equal to transformers' `generate` (GPT-2, both T5, both Llama, Qwen2)
    weights     bf16, fp16 and sharded Llama folders load into fp32 and match transformers
    errors      every broken folder is a ModelImportError naming the file, key or problem

Padding: BERT and T5 sources are right-padded, decoder prompts left-padded. Our decoders count positions
over real tokens only, so transformers gets position_ids = cumsum(mask) - 1 (clamped at 0) for GPT-2 and
Llama, which means the same thing. Only real positions are compared. Every figure is printed (`-s`) and
recorded as a `max_abs_diff` user property; the session's table is printed at the end of the module.
"""

import json
import math
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
import torch

from onnxformer.builder.generation import generate, generate_seq2seq
from onnxformer.builder.layers import AttentionOptions, FeedForwardOptions
from onnxformer.builder.pretrained import from_pretrained
from onnxformer.runtime.errors import ModelImportError

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOLERANCE = 1e-4
LENGTHS = (1, 7, 64)  # the tiny models have max_position_embeddings 80
BATCHES = (1, 3)
CACHED_STEPS = (1, 3)  # tokens fed per cached step after the first: one token, then a chunk of three
NEW_TOKENS = 20
FIGURES: dict[tuple[str, str], float] = {}  # (model, case) -> max abs diff, for the closing table


@cache
def ours(folder: Path):
    return from_pretrained(folder)


@cache
def theirs(folder: Path, kind: str = "AutoModel") -> torch.nn.Module:
    """transformers' eager fp32 model from the same folder."""
    auto = getattr(transformers, kind)
    return auto.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


def lengths_of(batch: int, length: int) -> list[int]:
    """Row lengths: the first row full, the others shorter (padded) when the batch has them."""
    return [length, max(1, length - 3), max(1, length // 2)][:batch]


def padded(
    lengths: list[int], vocab: int, *, side: str, pad_id: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids (B, T) of real tokens in [3, vocab), padded with pad_id on `side`, and their mask (B, T)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        real = slice(0, length) if side == "right" else slice(width - length, width)
        ids[row, real] = torch.randint(3, vocab, (length,), generator=generator)
        mask[row, real] = 1
    return ids, mask


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Max abs difference of (B, T, ...) tensors over the positions where mask (B, T) is 1 (all if None)."""
    assert a.shape == b.shape, (a.shape, b.shape)
    if mask is not None:
        a, b = a[mask.bool()], b[mask.bool()]
    return (a.float() - b.float()).abs().max().item()


def check(request: pytest.FixtureRequest, model: str, case: str, diffs: dict[str, float]) -> None:
    """Print and record the figures, then assert each is within the tolerance."""
    worst = max(diffs.values())
    FIGURES[(model, case)] = worst
    request.node.user_properties.append(("max_abs_diff", worst))
    print(f"\n{model:10s} {case:24s} " + "  ".join(f"{k}={v:.2e}" for k, v in diffs.items()))
    bad = {k: v for k, v in diffs.items() if not v <= TOLERANCE}
    assert not bad, f"{model} {case}: max abs diff above {TOLERANCE}: {bad}"


@pytest.fixture(scope="module", autouse=True)
def figures_table():
    yield
    if FIGURES:
        print("\nmax abs diff vs transformers eager (fp32), worst over the cases of each model:")
        for model in dict.fromkeys(m for m, _ in FIGURES):
            worst = max(v for (m, _), v in FIGURES.items() if m == model)
            print(f"  {model:12s} {worst:.2e}  ({sum(m == model for m, _ in FIGURES)} cases)")


# ---- BERT --------------------------------------------------------------------------------------------

BERT = {"bert": "BertModel", "bert-mlm": "BertForMaskedLM", "bert-cls": "BertForSequenceClassification"}


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name", BERT)
@torch.no_grad()
def test_bert_matches_transformers(
    hf_folders: dict[str, Path], request: pytest.FixtureRequest, name: str, batch: int, length: int
) -> None:
    folder = hf_folders[name]
    mine, hf = ours(folder), theirs(folder, BERT[name])
    assert mine.architecture == BERT[name]
    ids, mask = padded(lengths_of(batch, length), mine.config.vocab_size, side="right", pad_id=0)
    segments = (torch.arange(ids.shape[1]) >= length // 2).long().expand_as(ids) * mask  # a pair: A then B
    out = mine.model(ids, attention_mask=mask, token_type_ids=segments)
    ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=segments, output_hidden_states=True)
    diffs = {"hidden": max_diff(out.hidden, ref.hidden_states[-1], mask)}
    if name == "bert":
        assert out.mlm_logits is None and out.class_logits is None
        diffs["last_hidden"] = max_diff(out.hidden, ref.last_hidden_state, mask)
        diffs["pooler"] = max_diff(out.pooled, ref.pooler_output)
    elif name == "bert-mlm":
        assert out.pooled is None and out.class_logits is None
        diffs["logits"] = max_diff(out.mlm_logits, ref.logits, mask)
    else:
        assert out.mlm_logits is None
        diffs["logits"] = max_diff(out.class_logits, ref.logits)
    check(request, name, f"batch {batch} length {length}", diffs)


# ---- decoders: GPT-2 and Llama -----------------------------------------------------------------------

DECODERS = (
    "gpt2",
    "llama",
    "llama-tied",
    "qwen2",
    "qwen2-sliding",
    "qwen3",
    "mistral",
    "gemma2",
    "gemma3",
    "phi3",
    "phi3-longrope",
    "neox",
    "smollm3",
    "smollm2",
)


def hf_positions(mask: torch.Tensor) -> torch.Tensor:
    """(B, P + T) -> (B, P + T): each token's position counting real tokens only, what our model uses."""
    return (mask.cumsum(dim=1) - 1).clamp(min=0)


def decoder_steps(
    folder: Path, ids: torch.Tensor, mask: torch.Tensor, *, kind: str = "AutoModelForCausalLM"
) -> dict[str, float]:
    """First step on the left-padded prompt, then the cached steps; max abs logit diff of each."""
    mine, hf = ours(folder), theirs(folder, kind)
    vocab = mine.config.vocab_size
    out = mine.model(ids, attention_mask=mask)
    ref = hf(input_ids=ids, attention_mask=mask, position_ids=hf_positions(mask), use_cache=True)
    diffs = {"step 0": max_diff(out.logits, ref.logits, mask)}
    past, hf_cache = out.present, ref.cache
    for step, width in enumerate(CACHED_STEPS, start=1):
        new, new_mask = padded([width] * ids.shape[0], vocab, side="left", pad_id=0, seed=step)
        mask = torch.cat([mask, new_mask], dim=1)  # (B, P + T)
        out = mine.model(new, attention_mask=mask, past_key_values=past)
        ref = hf(
            input_ids=new,
            attention_mask=mask,
            position_ids=hf_positions(mask)[:, -width:],
            cache=hf_cache,
            use_cache=True,
        )
        diffs[f"step {step}"] = max_diff(out.logits, ref.logits)
        past, hf_cache = out.present, ref.cache
        assert past[0][0].shape[2] == mask.shape[1]
    return diffs


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name", DECODERS)
@torch.no_grad()
def test_decoder_matches_transformers(
    hf_folders: dict[str, Path], request: pytest.FixtureRequest, name: str, batch: int, length: int
) -> None:
    folder = hf_folders[name]
    mine = ours(folder)
    ids, mask = padded(lengths_of(batch, length), mine.config.vocab_size, side="left", pad_id=0)
    check(request, name, f"batch {batch} length {length}", decoder_steps(folder, ids, mask))


def test_llama_options_are_the_checkpoints(hf_folders: dict[str, Path]) -> None:
    """The Llama folders import with the options the parity is meant to cover."""
    untied, tied = ours(hf_folders["llama"]).config, ours(hf_folders["llama-tied"]).config
    for config in (untied, tied):
        block = config.block
        assert (config.n_heads, block.attention.n_kv_heads, block.rotary.base) == (4, 2, 5e5)
        assert (block.norm.kind, block.ffn.gated, block.ffn.activation, config.position) == (
            "rms",
            True,
            "silu",
            "rotary",
        )
    assert not untied.tie_embeddings and tied.tie_embeddings


def test_qwen2_is_a_llama_row_with_qkv_biases(hf_folders: dict[str, Path]) -> None:
    """Qwen2 imports through the Llama-like table: biases on q, k and v, none on the output projection."""
    imported = ours(hf_folders["qwen2"])
    attention = imported.config.block.attention
    assert (attention.qkv_bias, attention.out_bias, attention.n_kv_heads) == (True, False, 2)
    assert imported.config.block.rotary.base == 1e6
    names = set(imported.model.state_dict())
    assert {f"decoder.blocks.0.self_attn.{p}_proj.bias" for p in "qkv"} <= names
    assert "decoder.blocks.0.self_attn.out_proj.bias" not in names


def test_a_qwen2_with_sliding_windows_slides_from_max_window_layers(hf_folders: dict[str, Path]) -> None:
    """use_sliding_window without layer_types: the layers from max_window_layers on slide, as transformers 5
    derives them (the parity and greedy runs above prove the values)."""
    layers = ours(hf_folders["qwen2-sliding"]).config.layers
    assert [layer.attention.sliding_window for layer in layers] == [None, 8]
    assert not ours(hf_folders["qwen2"]).config.layers  # every layer the block: no per-layer options


def test_gemma_options_are_the_checkpoints(hf_folders: dict[str, Path]) -> None:
    """Each Gemma difference lands on its option, per layer where the config says so."""
    g2, g3 = ours(hf_folders["gemma2"]).config, ours(hf_folders["gemma3"]).config
    for config in (g2, g3):
        block = config.block
        assert (
            block.residual.sandwich and block.norm.weight_offset == 1.0 and config.embedding_scale == 32**0.5
        )
        assert (block.ffn.activation, block.ffn.gated, block.attention.head_dim) == ("gelu_tanh", True, 16)
    assert [layer.attention.sliding_window for layer in g2.layers] == [8, None, 8]
    assert (
        g2.block.attention.scale == 24**-0.5 and g2.block.attention.softcap == 3.0 and g2.logit_softcap == 4.0
    )
    assert [layer.attention.sliding_window for layer in g3.layers] == [8, 8, None]
    assert [layer.rotary.base for layer in g3.layers] == [1e4, 1e4, 1e6]
    assert g3.block.attention.qk_norm and g3.block.attention.softcap is None and g3.logit_softcap is None


def test_phi3_neox_and_smollm_options_are_the_checkpoints(hf_folders: dict[str, Path]) -> None:
    phi3, neox = ours(hf_folders["phi3"]).config, ours(hf_folders["neox"]).config
    assert (
        phi3.block.rotary.fraction,
        phi3.block.attention.sliding_window,
        phi3.block.attention.n_kv_heads,
    ) == (
        0.5,
        8,
        2,
    )
    assert (
        neox.block.rotary.fraction == 0.25
        and neox.block.residual.parallel
        and neox.block.norm.kind == "layer"
    )
    assert not neox.tie_embeddings and neox.block.ffn.activation == "gelu" and not neox.block.ffn.gated
    scaling = ours(hf_folders["phi3-longrope"]).config.block.rotary.scaling
    assert (scaling.kind, scaling.original_max_position_embeddings, scaling.factor) == ("longrope", 16, 5.0)
    assert scaling.attention_factor == pytest.approx((1 + math.log(5) / math.log(16)) ** 0.5, rel=1e-12)
    smol3 = ours(hf_folders["smollm3"]).config
    assert [layer.rotary is not None for layer in smol3.layers] == [True, False, True]  # interval 2: NoPE
    assert [layer.attention.sliding_window for layer in smol3.layers] == [None, None, 8]
    smol2 = ours(hf_folders["smollm2"])
    assert (
        smol2.architecture == "LlamaForCausalLM" and smol2.config.tie_embeddings and not smol2.config.layers
    )
    assert (smol2.config.n_heads, smol2.config.block.attention.n_kv_heads) == (6, 2)


# ---- T5 ----------------------------------------------------------------------------------------------

T5 = ("t5", "t5-gated")


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("name", T5)
@torch.no_grad()
def test_t5_matches_transformers(
    hf_folders: dict[str, Path], request: pytest.FixtureRequest, name: str, batch: int, length: int
) -> None:
    """Encoder states on real source tokens; decoder logits for `length` target tokens (the start token
    first), then cached steps through our encode / cross_key_values / decode."""
    folder = hf_folders[name]
    mine, hf = ours(folder), theirs(folder, "AutoModelForSeq2SeqLM")
    model, vocab = mine.model, mine.config.vocab_size
    source, source_mask = padded(lengths_of(batch, length), vocab, side="right", pad_id=0)
    target, _ = padded([length] * batch, vocab, side="right", pad_id=0, seed=1)
    target[:, 0] = mine.config.decoder_start_token_id
    memory = model.encode(source, attention_mask=source_mask).hidden
    cross = model.cross_key_values(memory)
    out = model.decode(target, cross_key_values=cross, encoder_attention_mask=source_mask)
    encoded = hf.get_encoder()(input_ids=source, attention_mask=source_mask)
    ref = hf(encoder_outputs=encoded, attention_mask=source_mask, decoder_input_ids=target, use_cache=True)
    diffs = {
        "encoder": max_diff(memory, encoded.last_hidden_state, source_mask),
        "step 0": max_diff(out.logits, ref.logits),
    }
    past, hf_cache = out.present, ref.cache
    decoder_mask = torch.ones_like(target)
    for step, width in enumerate(CACHED_STEPS, start=1):
        new, _ = padded([width] * batch, vocab, side="right", pad_id=0, seed=1 + step)
        decoder_mask = torch.cat([decoder_mask, torch.ones_like(new)], dim=1)  # (B, P + T)
        out = model.decode(
            new,
            cross_key_values=cross,
            encoder_attention_mask=source_mask,
            attention_mask=decoder_mask,
            past_key_values=past,
        )
        ref = hf(
            encoder_outputs=encoded,
            attention_mask=source_mask,
            decoder_input_ids=new,
            cache=hf_cache,
            use_cache=True,
        )
        diffs[f"step {step}"] = max_diff(out.logits, ref.logits)
        past, hf_cache = out.present, ref.cache
    check(request, name, f"batch {batch} length {length}", diffs)


def test_t5_options_are_the_checkpoints(hf_folders: dict[str, Path]) -> None:
    v10, v11 = ours(hf_folders["t5"]).config, ours(hf_folders["t5-gated"]).config
    assert (v10.block.ffn, v10.tie_embeddings, v10.scale_decoder_outputs) == (
        FeedForwardOptions("relu", gated=False, bias=False),
        True,
        True,
    )
    assert (v11.block.ffn, v11.tie_embeddings) == (
        FeedForwardOptions("gelu_tanh", gated=True, bias=False),
        False,
    )
    for config in (v10, v11):
        assert config.block.attention == AttentionOptions(
            head_dim=config.block.attention.head_dim, scale=1.0, qkv_bias=False, out_bias=False
        )
    assert (v11.n_layers, v11.decoder_layers) == (2, 3)


# ---- greedy generation -------------------------------------------------------------------------------

PROMPTS = ([5, 17, 9, 33, 12, 40, 7], [21, 8, 30])  # the second one shorter: left-padded in a batch
# Generations kept short of a switch that transformers' generate makes and our decoding does not: when a
# longrope Phi-3's sequence first passes original_max_position_embeddings (16 here), generate drops its cache
# and recomputes every position with the long factors; our loops (and every host's) keep the cache, whose
# earlier keys were rotated with the short ones. Each call's logits still equal transformers' forward on
# the same inputs and cache, in both regimes (test_decoder_matches_transformers: lengths 7 and 64).
BUDGETS = {"phi3-longrope": 16 - len(PROMPTS[0])}


def left_padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The given ids left-padded with pad: ids (B, T) and mask (B, T)."""
    width = max(len(row) for row in rows)
    ids = torch.tensor([[pad] * (width - len(row)) + row for row in rows])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows])
    return ids, mask


def hf_new_tokens(sequences: torch.Tensor, start: int, eos: int | None) -> list[list[int]]:
    """transformers' generated tokens per row, cut at the first eos (which ours leaves out)."""
    rows = []
    for row in sequences[:, start:].tolist():
        rows.append(row[: row.index(eos)] if eos is not None and eos in row else row)
    return rows


@pytest.mark.parametrize("batch", (1, 2))
@pytest.mark.parametrize("name", DECODERS)
@torch.no_grad()
def test_greedy_generation_equals_transformers(hf_folders: dict[str, Path], name: str, batch: int) -> None:
    folder = hf_folders[name]
    mine, hf = ours(folder), theirs(folder, "AutoModelForCausalLM")
    pad, eos = mine.special_tokens["pad"], mine.special_tokens.get("eos")
    prompts = [list(p) for p in PROMPTS[:batch]]
    stops = () if eos is None else (eos,)
    budget = BUDGETS.get(name, NEW_TOKENS)
    got = generate(mine.model, prompts, max_new_tokens=budget, stop_tokens=stops, pad_id=pad)
    ids, mask = left_padded(prompts, pad)
    sequences = hf.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        num_beams=1,
        max_new_tokens=budget,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    expected = hf_new_tokens(sequences, ids.shape[1], eos)
    print(f"\n{name} batch {batch}: {[g.tokens for g in got]}")
    assert [g.tokens for g in got] == expected
    assert all(len(g.tokens) == budget or g.finish_reason == "stop" for g in got)
    assert len(got[0].tokens) > 0


@pytest.mark.parametrize("batch", (1, 2))
@pytest.mark.parametrize("name", T5)
@torch.no_grad()
def test_greedy_seq2seq_equals_transformers(hf_folders: dict[str, Path], name: str, batch: int) -> None:
    """Our generate_seq2seq left-pads the sources; T5's relative positions make that the same as right
    padding, and transformers gets the same left-padded batch."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    folder = hf_folders[name]
    mine, hf = ours(folder), theirs(folder, "AutoModelForSeq2SeqLM")
    pad, eos = mine.special_tokens["pad"], mine.special_tokens["eos"]
    sources = [list(p) for p in PROMPTS[:batch]]
    got = generate_seq2seq(mine.model, sources, max_new_tokens=NEW_TOKENS, stop_tokens=(eos,), pad_id=pad)
    ids, mask = left_padded(sources, pad)
    sequences = hf.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        num_beams=1,
        max_new_tokens=NEW_TOKENS,
        eos_token_id=eos,
        pad_token_id=pad,
        decoder_start_token_id=mine.config.decoder_start_token_id,
        # transformers sizes the cache it makes itself by num_layers, which breaks with 3 decoder layers
        cache=EncoderDecoderCache(DynamicCache(), DynamicCache()),
    )
    expected = hf_new_tokens(sequences, 1, eos)  # after the decoder start token
    print(f"\n{name} batch {batch}: {[g.tokens for g in got]}")
    assert [g.tokens for g in got] == expected
    assert len(got[0].tokens) > 0


# ---- weights: fp16, bf16, shards ---------------------------------------------------------------------


def stored_dtypes(folder: Path) -> set[torch.dtype]:
    from safetensors.torch import load_file

    return {t.dtype for f in folder.glob("*.safetensors") for t in load_file(f).values()}


@pytest.mark.parametrize(
    ("name", "stored"),
    [("llama-bf16", torch.bfloat16), ("llama-fp16", torch.float16), ("llama-sharded", torch.float32)],
)
@torch.no_grad()
def test_llama_weights_load_into_fp32(
    hf_folders: dict[str, Path], request: pytest.FixtureRequest, name: str, stored: torch.dtype
) -> None:
    folder = hf_folders[name]
    assert stored_dtypes(folder) == {stored}
    if name == "llama-sharded":
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        assert len(set(index["weight_map"].values())) > 1 and not (folder / "model.safetensors").exists()
    model = ours(folder).model
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    ids, mask = padded(lengths_of(3, 7), model.config.vocab_size, side="left", pad_id=0)
    check(request, name, "batch 3 length 7", decoder_steps(folder, ids, mask))


# ---- errors ------------------------------------------------------------------------------------------


@pytest.fixture
def bert_copy(hf_folders: dict[str, Path], tmp_path: Path) -> Path:
    """A private copy of the BertModel folder that a test may break."""
    return Path(shutil.copytree(hf_folders["bert"], tmp_path / "bert"))


def tamper(folder: Path, change: Callable[[dict[str, torch.Tensor]], object]) -> None:
    """Rewrite the folder's model.safetensors with change(tensors) applied."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    change(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def import_error(folder: Path | str) -> str:
    with pytest.raises(ModelImportError) as caught:
        from_pretrained(folder)
    return str(caught.value)


def test_a_folder_without_config_json(bert_copy: Path) -> None:
    (bert_copy / "config.json").unlink()
    message = import_error(bert_copy)
    assert "config.json" in message and str(bert_copy) in message


def test_a_folder_without_weights(bert_copy: Path) -> None:
    (bert_copy / "model.safetensors").unlink()
    message = import_error(bert_copy)
    assert "model.safetensors" in message and "model.safetensors.index.json" in message


def test_a_pickle_checkpoint_is_refused_with_the_conversion(bert_copy: Path) -> None:
    from safetensors.torch import load_file

    torch.save(load_file(bert_copy / "model.safetensors"), bert_copy / "pytorch_model.bin")
    (bert_copy / "model.safetensors").unlink()
    message = import_error(bert_copy)
    assert "pytorch_model.bin" in message and "pickle" in message
    assert "transformers.BertModel.from_pretrained(path).save_pretrained(path)" in message  # the fix


def test_an_unsupported_architecture_lists_the_supported(bert_copy: Path) -> None:
    config = json.loads((bert_copy / "config.json").read_text())
    config |= {"architectures": ["FalconForCausalLM"], "model_type": "falcon"}
    (bert_copy / "config.json").write_text(json.dumps(config))
    message = import_error(bert_copy)
    assert "'FalconForCausalLM' is not supported" in message
    for supported in ("BertModel", "GPT2LMHeadModel", "T5ForConditionalGeneration", "LlamaForCausalLM"):
        assert supported in message


def test_an_unknown_tensor_is_named(bert_copy: Path) -> None:
    tamper(bert_copy, lambda t: t.__setitem__("encoder.layer.0.attention.self.gate.weight", torch.ones(4)))
    assert "encoder.layer.0.attention.self.gate.weight" in import_error(bert_copy)


def test_a_missing_tensor_is_named(bert_copy: Path) -> None:
    tamper(bert_copy, lambda t: t.pop("encoder.layer.1.output.dense.weight"))
    message = import_error(bert_copy)
    assert "encoder.layer.1.output.dense.weight" in message and "no tensor" in message


def test_a_wrong_shape_names_the_key_and_both_shapes(bert_copy: Path) -> None:
    tamper(
        bert_copy, lambda t: t.__setitem__("encoder.layer.0.intermediate.dense.weight", torch.ones(48, 32))
    )
    message = import_error(bert_copy)
    assert "encoder.layer.0.intermediate.dense.weight" in message
    assert "(48, 32)" in message and "(64, 32)" in message


def test_a_wrong_fused_shape_says_how_it_was_cut(hf_folders: dict[str, Path], tmp_path: Path) -> None:
    """GPT-2's c_attn is cut in three and transposed: the message shows the shape before and after."""
    folder = Path(shutil.copytree(hf_folders["gpt2"], tmp_path / "gpt2"))
    tamper(folder, lambda t: t.__setitem__("transformer.h.1.attn.c_attn.weight", torch.ones(32, 72)))
    message = import_error(folder)
    assert "transformer.h.1.attn.c_attn.weight" in message and "(32, 72)" in message
    assert "(24, 32)" in message and "(32, 32)" in message and "part 1 of 3" in message


def test_a_missing_shard_is_named(hf_folders: dict[str, Path], tmp_path: Path) -> None:
    folder = Path(shutil.copytree(hf_folders["llama-sharded"], tmp_path / "llama"))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[-1]
    (folder / shard).unlink()
    assert shard in import_error(folder)


def test_a_folder_without_tokenizer_json(bert_copy: Path) -> None:
    (bert_copy / "tokenizer.json").unlink()
    assert "tokenizer.json" in import_error(bert_copy)


def test_a_hub_id_is_not_fetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("the importer tried to reach the network")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    message = import_error("bert-base-uncased")
    assert "bert-base-uncased" in message and "not a folder" in message and "download" in message
