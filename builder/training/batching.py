"""Turning token lists into padded tensors, and drawing reproducible batches."""

from collections.abc import Sequence

import torch

IGNORE = -100  # label value cross_entropy skips


def pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad to the longest: ids (B, T) and attention mask (B, T) with 1 on real tokens."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)  # (B, T)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(list(sequence), dtype=torch.long)
        mask[row, : len(sequence)] = 1
    return ids, mask


def draw(count: int, batch_size: int, generator: torch.Generator) -> list[int]:
    """Indices of one batch, drawn with replacement from the data generator (whose state checkpoints keep)."""
    return torch.randint(count, (batch_size,), generator=generator).tolist()


def shifted_labels(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Next-token targets for ids[:, :-1]: ids[:, 1:], with padding ignored. (B, T - 1)."""
    labels = ids[:, 1:].clone()  # (B, T - 1)
    labels[mask[:, 1:] == 0] = IGNORE
    return labels
