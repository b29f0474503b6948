"""Turning token lists into padded tensors, and drawing reproducible batches."""

from collections.abc import Sequence
from dataclasses import asdict, dataclass

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


@dataclass
class Truncation:
    """What cutting texts to the model's context removed: reported, never silent."""

    limit: int  # tokens a text may keep (the context less its special tokens)
    texts: int = 0  # texts seen
    cut_texts: int = 0  # texts longer than `limit`
    cut_tokens: int = 0  # tokens removed from them
    total_tokens: int = 0  # tokens before cutting
    longest: int = 0  # tokens of the longest text

    def clip(self, ids: list[int], limit: int | None = None) -> list[int]:
        limit = self.limit if limit is None else limit
        self.texts += 1
        self.total_tokens += len(ids)
        self.longest = max(self.longest, len(ids))
        if len(ids) > limit:
            self.cut_texts += 1
            self.cut_tokens += len(ids) - limit
        return ids[:limit]

    def message(self, what: str) -> str | None:
        """A one-line warning when anything was cut, else None."""
        if not self.cut_texts:
            return None
        share = self.cut_tokens / max(self.total_tokens, 1)
        return (
            f"{self.cut_texts} of {self.texts} {what} are longer than the model's context "
            f"({self.limit} tokens, the longest has {self.longest}): {self.cut_tokens} tokens "
            f"({share:.1%} of the data) were cut off their ends; split long lines or raise --max-len"
        )

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
