"""Input checks shared by the layers: wrong rank or width becomes an `InputError` that says what to change.

Shape legend used across the builder: B batch, T query length, S key/source length, P past length,
D model width, H heads, Dh head width, F ffn width, V vocab.
"""

from collections.abc import Sequence

import torch

from onnxformer.runtime.errors import ConfigError, InputError


def check_tensor(
    tensor: torch.Tensor,
    name: str,
    *,
    dims: Sequence[str],
    sizes: dict[int, int] | None = None,
) -> None:
    """Raise `InputError` unless `tensor` has rank len(dims) and the given fixed sizes.

    `dims` names each axis for the message, e.g. ("B", "T", "D"); `sizes` maps axis index to the size
    that axis must have (a model width, a head count).
    """
    if not isinstance(tensor, torch.Tensor):
        raise InputError(f"{name} must be a torch.Tensor of shape ({', '.join(dims)}), got {type(tensor)}")
    if tensor.dim() != len(dims):
        raise InputError(
            f"{name} must have rank {len(dims)} with shape ({', '.join(dims)}), "
            f"got shape {tuple(tensor.shape)}; reshape it to ({', '.join(dims)})"
        )
    for axis, size in (sizes or {}).items():
        if tensor.shape[axis] != size:
            raise InputError(
                f"{name} axis {dims[axis]} must be {size}, got {tensor.shape[axis]} "
                f"(shape {tuple(tensor.shape)}); give {name} {dims[axis]}={size}"
            )


def check_same(a: int, b: int, what: str) -> None:
    """Raise `InputError` when two sizes that must agree do not."""
    if a != b:
        raise InputError(f"{what}: {a} != {b}")


def check_heads(d_model: int, n_heads: int) -> int:
    """Return the head width Dh = D / H, or raise `ConfigError` when D is not divisible by H."""
    if d_model <= 0 or n_heads <= 0:
        raise ConfigError(f"d_model and n_heads must be positive, got d_model={d_model}, n_heads={n_heads}")
    if d_model % n_heads:
        divisors = [h for h in range(1, min(d_model, 64) + 1) if d_model % h == 0]
        raise ConfigError(
            f"d_model={d_model} is not divisible by n_heads={n_heads}; "
            f"choose n_heads from {divisors} or change d_model"
        )
    return d_model // n_heads


def check_positive(**values: float) -> None:
    """Raise `ConfigError` for any value that is not > 0."""
    for name, value in values.items():
        if value <= 0:
            raise ConfigError(f"{name} must be > 0, got {value}")


def check_dropout(p: float) -> None:
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"dropout must be in [0, 1), got {p}")


def check_kv_heads(n_heads: int, n_kv_heads: int) -> None:
    """Raise `ConfigError` unless n_kv_heads is positive and divides n_heads (grouped-query attention)."""
    if n_kv_heads <= 0:
        raise ConfigError(f"n_kv_heads must be positive, got {n_kv_heads}; use n_kv_heads=n_heads for MHA")
    if n_heads % n_kv_heads:
        divisors = [h for h in range(1, n_heads + 1) if n_heads % h == 0]
        raise ConfigError(
            f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}: every key/value head serves "
            f"the same number of query heads; choose n_kv_heads from {divisors}"
        )
