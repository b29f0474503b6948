"""BERT's tasks, trained jointly: masked-token prediction and well-formed vs shuffled classification.

Inputs are framed <cls> sentence <sep>. Masking follows BERT (Devlin et al., 2019, 3.1): 15% of the
sentence's tokens are chosen; of those 80% become <mask>, 10% a random token, 10% stay. The masked-LM loss
counts only well-formed sentences (a shuffled one would teach wrong word statistics); the classifier reads
the pooled <cls> vector of the same, partly masked, input.
"""

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from onnxformer.builder.data import classification_examples, read_corpus_file, split_held_out
from onnxformer.builder.families import BERT
from onnxformer.builder.tokenizer import encode, special_tokens
from onnxformer.builder.training.batching import IGNORE, Truncation, draw, pad

BUILTIN_EXAMPLES = 12_000
MASK_RATE = 0.15


def shuffle_text(text: str, rng: random.Random) -> str | None:
    """The words of `text` in another order, or None when no other order exists (one word, all equal)."""
    words = text.split()
    if len(set(words)) < 2:
        return None
    while True:
        shuffled = words[:]
        rng.shuffle(shuffled)
        if shuffled != words:
            return " ".join(shuffled)


@dataclass
class BERTTask:
    train_examples: list[tuple[str, int]]
    held_out_examples: list[tuple[str, int]]

    @classmethod
    def builtin_corpus(cls, seed: int, *, val_fraction: float = 0.1) -> "BERTTask":
        examples = classification_examples(BUILTIN_EXAMPLES, seed=seed)
        train, held = split_held_out(examples, fraction=val_fraction, seed=seed)
        return cls(train, held)

    @classmethod
    def from_texts(cls, texts: list[str], seed: int, *, val_fraction: float = 0.1) -> "BERTTask":
        """User text: each line is a well-formed example, and a word-shuffled copy of it a negative one.

        The lines are split first, so a held-out line's shuffle is held out with it, and the held-out side
        always has well-formed text to score the masked-token loss on (one line is refused, as for GPT).
        """
        train_lines, held_lines = split_held_out(texts, fraction=val_fraction, seed=seed)
        rng = random.Random(f"shuffle:{seed}")

        def examples(lines: list[str]) -> list[tuple[str, int]]:
            made = [(text, 1) for text in lines]
            made += [(s, 0) for s in (shuffle_text(t, rng) for t in lines) if s is not None]
            rng.shuffle(made)
            return made

        return cls(examples(train_lines), examples(held_lines))

    @classmethod
    def from_file(cls, path: str, seed: int, *, val_fraction: float = 0.1) -> "BERTTask":
        """The user's file: one text per line."""
        return cls.from_texts(read_corpus_file(path), seed, val_fraction=val_fraction)

    def tokenizer_texts(self) -> list[str]:
        return [text for text, label in self.train_examples if label == 1]

    def train_items(self) -> int:
        return len(self.train_examples)

    def prepare(self, tokenizer: Tokenizer, max_len: int) -> Truncation:
        self.special = special_tokens(tokenizer)
        self.vocab_size = tokenizer.get_vocab_size()
        self.first_regular = max(vars(self.special).values()) + 1  # random replacements skip specials
        truncation = Truncation(limit=max_len - 2)

        def frame(text: str) -> list[int]:
            return [self.special.cls, *truncation.clip(encode(tokenizer, text)), self.special.sep]

        self.train_ids = [(frame(t), label) for t, label in self.train_examples]
        self.held_out_ids = [(frame(t), label) for t, label in self.held_out_examples]
        return truncation

    def _mask(
        self, ids: torch.Tensor, attention: torch.Tensor, labels: torch.Tensor, generator: torch.Generator
    ):
        """BERT masking on (B, T) ids; returns (masked ids, mlm labels)."""
        inner = attention.bool().clone()
        inner[:, 0] = False  # <cls>
        inner[torch.arange(ids.shape[0]), attention.sum(dim=1) - 1] = False  # <sep>
        chosen = (torch.rand(ids.shape, generator=generator) < MASK_RATE) & inner  # (B, T)
        mlm_labels = torch.where(chosen & (labels[:, None] == 1), ids, torch.full_like(ids, IGNORE))
        roll = torch.rand(ids.shape, generator=generator)  # (B, T)
        random_ids = torch.randint(self.first_regular, self.vocab_size, ids.shape, generator=generator)
        masked = torch.where(chosen & (roll < 0.8), torch.full_like(ids, self.special.mask), ids)
        masked = torch.where(chosen & (roll >= 0.8) & (roll < 0.9), random_ids, masked)
        return masked, mlm_labels

    def batch(self, indices: list[int], generator: torch.Generator, *, held_out: bool = False) -> dict:
        source = self.held_out_ids if held_out else self.train_ids
        rows = [source[i] for i in indices]
        ids, attention = pad([r[0] for r in rows], self.special.pad)  # (B, T)
        labels = torch.tensor([r[1] for r in rows], dtype=torch.long)  # (B,)
        masked, mlm_labels = self._mask(ids, attention, labels, generator)
        return {
            "input_ids": masked,
            "clean_ids": ids,
            "attention_mask": attention,
            "labels": labels,
            "mlm_labels": mlm_labels,
        }

    def sample_batch(self, generator: torch.Generator, batch_size: int) -> dict[str, torch.Tensor]:
        return self.batch(draw(len(self.train_ids), batch_size, generator), generator)

    def normalisers(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """What each loss term is divided by, counted on the whole (global) batch."""
        return {"masked": int((batch["mlm_labels"] != IGNORE).sum()), "examples": len(batch["labels"])}

    def loss_sums(self, model: BERT, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Masked-token loss summed over the masked tokens, classification loss over the examples."""
        out = model(batch["input_ids"], attention_mask=batch["attention_mask"])
        mlm_logits = out.mlm_logits.flatten(0, 1)  # (B * T, V)
        return {
            "masked": F.cross_entropy(
                mlm_logits, batch["mlm_labels"].flatten(), ignore_index=IGNORE, reduction="sum"
            ),
            "examples": F.cross_entropy(out.class_logits, batch["labels"], reduction="sum"),
        }

    def tokens_in(self, batch: dict[str, torch.Tensor]) -> int:
        return int(batch["attention_mask"].sum())

    @torch.no_grad()
    def evaluate(self, model: BERT, *, limit: int = 2000) -> dict[str, float]:
        """Held-out: loss, masked-token accuracy (masked input), classification accuracy (clean input)."""
        model.eval()
        generator = torch.Generator().manual_seed(1234)  # the same masks at every evaluation
        indices = list(range(min(limit, len(self.held_out_ids))))
        mlm_loss = class_loss = mlm_hits = mlm_count = class_hits = 0.0
        for start in range(0, len(indices), 256):
            batch = self.batch(indices[start : start + 256], generator, held_out=True)
            sums = self.loss_sums(model, batch)
            mlm_loss += float(sums["masked"])
            class_loss += float(sums["examples"])
            out = model(batch["input_ids"], attention_mask=batch["attention_mask"])
            chosen = batch["mlm_labels"] != IGNORE
            mlm_hits += float((out.mlm_logits.argmax(-1)[chosen] == batch["mlm_labels"][chosen]).sum())
            mlm_count += float(chosen.sum())
            clean = model(batch["clean_ids"], attention_mask=batch["attention_mask"])
            class_hits += float((clean.class_logits.argmax(-1) == batch["labels"]).sum())
        return {
            # No masked token in a tiny held-out set counts as zero loss, never NaN.
            "val_loss": mlm_loss / max(mlm_count, 1) + class_loss / max(len(indices), 1),
            "masked_token_accuracy": mlm_hits / max(mlm_count, 1),
            "classification_accuracy": class_hits / max(len(indices), 1),
        }

    def quality(self, model: BERT, *, seed: int, samples: int = 1) -> dict[str, float]:
        """Every held-out example (`samples` is for the generative tasks; 0 skips the check)."""
        self.samples: list[str] = []
        if samples < 1:
            return {}
        return self.evaluate(model, limit=len(self.held_out_ids))
