"""Checkpoint tensors onto our parameters: a key mapping in which nothing is dropped silently.

An architecture's mapping says, for every parameter of our model, which checkpoint tensor it comes from
(`Take`), possibly transposed (GPT-2's Conv1D stores (in, out)) or cut out of a fused tensor (GPT-2's
c_attn holds q, k and v side by side). It also names the checkpoint tensors that are known and not needed
(`ignored`: a buffer such as BERT's position_ids, a tied copy such as T5's encoder.embed_tokens), each with
the reason. `load_mapped` then fails on the first of:

- a parameter with no source in the checkpoint (missing key),
- a source of another shape than the parameter's,
- a checkpoint tensor that is neither mapped nor ignored (unknown key: an option we do not represent).
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from onnxformer.builder.training.checkpoint import unique_state_dict
from onnxformer.runtime.errors import ModelImportError

Transform = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Take:
    """Our parameter = transform(checkpoint[key])."""

    key: str
    transform: Transform | None = None
    note: str = ""  # what the transform does, for error messages ("Conv1D transposed")


def transposed(key: str) -> Take:
    return Take(key, lambda t: t.t(), "Conv1D (in, out) transposed")


def chunk(key: str, index: int, parts: int, *, dim: int, transpose: bool = False) -> Take:
    """Part `index` of `parts` equal slices of a fused tensor along `dim` (then transposed)."""

    def cut(tensor: torch.Tensor) -> torch.Tensor:
        piece = tensor.chunk(parts, dim=dim)[index]
        return piece.t() if transpose else piece

    return Take(
        key, cut, f"part {index + 1} of {parts} along axis {dim}" + (", transposed" if transpose else "")
    )


def map_head(
    keys: dict[str, Take], ignored: dict[str, str], *, tied: bool, theirs: str = "lm_head.weight"
) -> tuple[dict[str, Take], dict[str, str]]:
    """(keys, ignored) with the LM head added: taken from `theirs`, or, when tied to the token embedding,
    that checkpoint tensor named as known and unneeded."""
    if tied:
        ignored[theirs] = "tied to the token embedding"
    else:
        keys["lm_head.weight"] = Take(theirs)
    return keys, ignored


def rows(key: str, start: int, stop: int) -> Take:
    """Rows start .. stop - 1 of a fused tensor (Phi-3's qkv_proj: q, then k, then v, of unequal sizes
    under grouped-query attention)."""
    return Take(key, lambda tensor: tensor[start:stop], f"rows {start}:{stop}")


def per_head(key: str, index: int, parts: int, heads: int) -> Take:
    """Part `index` of `parts` interleaved per head (GPT-NeoX's query_key_value: for each head its query,
    key and value rows in turn): rows (H * parts * Dh, ...) -> (H * Dh, ...)."""

    def cut(tensor: torch.Tensor) -> torch.Tensor:
        grouped = tensor.reshape(heads, parts, -1, *tensor.shape[1:])  # (H, parts, Dh, ...)
        return grouped[:, index].reshape(-1, *tensor.shape[1:])  # (H * Dh, ...)

    return Take(key, cut, f"part {index + 1} of {parts} of each of {heads} heads")


def load_mapped(
    model: nn.Module,
    tensors: dict[str, torch.Tensor],
    mapping: dict[str, Take],
    ignored: dict[str, str],
    *,
    source: str,
) -> None:
    """Fill `model`'s parameters from `tensors` through `mapping` (our key -> Take); `ignored` maps the
    checkpoint keys known to be unneeded to why. Raises ModelImportError naming the key on any mismatch."""
    ours = unique_state_dict(model)
    unmapped = sorted(set(ours) - set(mapping))
    if unmapped:  # a bug in an architecture's mapping, not in the user's folder
        raise ModelImportError(f"the {source} mapping has no source for {unmapped[:5]} (an onnxformer bug)")
    state = {}
    used: set[str] = set()
    for name, take in mapping.items():
        if name not in ours:
            raise ModelImportError(
                f"the {source} mapping fills {name!r}, which the model lacks (an onnxformer bug)"
            )
        if take.key not in tensors:
            raise ModelImportError(
                f"the checkpoint has no tensor {take.key!r} (for {name}); the folder's weights are "
                f"incomplete or not those of its config.json ({source})"
            )
        tensor = tensors[take.key]
        value = take.transform(tensor) if take.transform else tensor
        expected = tuple(ours[name].shape)
        if tuple(value.shape) != expected:
            how = f" (-> {tuple(value.shape)} after {take.note})" if take.transform else ""
            raise ModelImportError(
                f"checkpoint tensor {take.key!r} has shape {tuple(tensor.shape)}{how}, expected {expected} "
                f"for {name} from config.json; the weights do not match the config"
            )
        state[name] = value.to(ours[name].dtype).contiguous()
        used.add(take.key)
    unknown = sorted(set(tensors) - used - set(ignored))
    if unknown:
        raise ModelImportError(
            f"the checkpoint holds {len(unknown)} tensor(s) the {source} import does not map, first "
            f"{unknown[:5]}: they belong to a part or option onnxformer cannot represent, "
            "so the import stops rather than drop them"
        )
    missing, unexpected = model.load_state_dict(state, strict=False)
    # What load_state_dict reports missing must be a tie (a parameter shared with one we filled).
    shared = {name for name in model.state_dict() if name not in ours}
    left = sorted(set(missing) - shared) + sorted(unexpected)
    if left:
        raise ModelImportError(f"loading the {source} weights left {left[:5]} unfilled (an onnxformer bug)")
