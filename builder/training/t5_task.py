"""T5's task: text to text. Built in: active to passive voice; from a file: source<TAB>target pairs.

Sources are framed `source </s>`, targets `<s> target </s>` (teacher forcing: the decoder reads the target
shifted right and predicts it). Quality: exact match of greedy outputs on held-out pairs.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from onnxformer.builder.data import passive_pairs, read_pairs_file, split_held_out
from onnxformer.builder.families import T5
from onnxformer.builder.generation import generate_seq2seq
from onnxformer.builder.tokenizer import decode, encode, special_tokens
from onnxformer.builder.training.batching import IGNORE, Truncation, draw, pad, shifted_labels

BUILTIN_PAIRS = 12_000
QUALITY_EXAMPLES = 500


@dataclass
class T5Task:
    train_pairs: list[tuple[str, str]]
    held_out_pairs: list[tuple[str, str]]

    @classmethod
    def builtin_corpus(cls, seed: int, *, val_fraction: float = 0.1) -> "T5Task":
        pairs = passive_pairs(BUILTIN_PAIRS, seed=seed)
        train, held = split_held_out(pairs, fraction=val_fraction, seed=seed)
        return cls(train, held)

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, str]], seed: int, *, val_fraction: float = 0.1) -> "T5Task":
        train, held = split_held_out(pairs, fraction=val_fraction, seed=seed)
        return cls(train, held)

    @classmethod
    def from_file(cls, path: str, seed: int, *, val_fraction: float = 0.1) -> "T5Task":
        """The user's file: source<TAB>target per line."""
        return cls.from_pairs(read_pairs_file(path), seed, val_fraction=val_fraction)

    def tokenizer_texts(self) -> list[str]:
        return [text for pair in self.train_pairs for text in pair]

    def train_items(self) -> int:
        return len(self.train_pairs)

    def prepare(self, tokenizer: Tokenizer, max_len: int) -> Truncation:
        self.tokenizer = tokenizer
        self.special = special_tokens(tokenizer)
        self.max_len = max_len
        truncation = Truncation(limit=max_len - 1)  # sources and targets each keep max_len - 1 tokens

        def frame(source: str, target: str) -> tuple[list[int], list[int]]:
            source_ids = [*truncation.clip(encode(tokenizer, source)), self.special.eos]
            target_ids = [self.special.bos, *truncation.clip(encode(tokenizer, target)), self.special.eos]
            return source_ids, target_ids

        self.train_ids = [frame(s, t) for s, t in self.train_pairs]
        self.held_out_ids = [frame(s, t) for s, t in self.held_out_pairs]
        return truncation

    def batch(self, indices: list[int], *, held_out: bool = False) -> dict[str, torch.Tensor]:
        source = self.held_out_ids if held_out else self.train_ids
        rows = [source[i] for i in indices]
        source_ids, source_mask = pad([r[0] for r in rows], self.special.pad)  # (B, S)
        target_ids, target_mask = pad([r[1] for r in rows], self.special.pad)  # (B, T + 1)
        return {
            "input_ids": source_ids,
            "attention_mask": source_mask,
            "decoder_input_ids": target_ids[:, :-1],
            "decoder_attention_mask": target_mask[:, :-1],
            "labels": shifted_labels(target_ids, target_mask),
        }

    def sample_batch(self, generator: torch.Generator, batch_size: int) -> dict[str, torch.Tensor]:
        return self.batch(draw(len(self.train_ids), batch_size, generator))

    def normalisers(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """What each loss term is divided by, counted on the whole (global) batch."""
        return {"tokens": int((batch["labels"] != IGNORE).sum())}

    def loss_sums(self, model: T5, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        logits = model(
            batch["input_ids"],
            batch["decoder_input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_attention_mask=batch["decoder_attention_mask"],
        ).logits  # (B, T, V)
        flat = logits.flatten(0, 1)  # (B * T, V)
        return {
            "tokens": F.cross_entropy(flat, batch["labels"].flatten(), ignore_index=IGNORE, reduction="sum")
        }

    def tokens_in(self, batch: dict[str, torch.Tensor]) -> int:
        return int(batch["attention_mask"].sum() + batch["decoder_attention_mask"].sum())

    @torch.no_grad()
    def evaluate(self, model: T5, *, limit: int = 1000) -> dict[str, float]:
        model.eval()
        indices = list(range(min(limit, len(self.held_out_ids))))
        total, count = 0.0, 0
        for start in range(0, len(indices), 128):
            batch = self.batch(indices[start : start + 128], held_out=True)
            total += float(self.loss_sums(model, batch)["tokens"])
            count += self.normalisers(batch)["tokens"]
        loss = total / max(count, 1)  # per target token
        return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 50.0))}

    def quality(self, model: T5, *, seed: int, samples: int = QUALITY_EXAMPLES) -> dict[str, float]:
        """Exact match of greedy outputs on up to `samples` held-out pairs (0 skips the check)."""
        self.samples: list[str] = []
        if samples < 1:
            return {}
        pairs = self.held_out_pairs[:samples]
        sources = [ids for ids, _ in self.held_out_ids[: len(pairs)]]
        hits = 0
        for start in range(0, len(sources), 100):
            results = generate_seq2seq(
                model,
                sources[start : start + 100],
                max_new_tokens=self.max_len,
                stop_tokens={self.special.eos},
                pad_id=self.special.pad,
            )
            for (source, target), result in zip(pairs[start : start + 100], results, strict=True):
                output = decode(self.tokenizer, result.tokens)
                hits += output == target
                if len(self.samples) < 5:
                    self.samples.append(f"{source} -> {output}")
        return {"exact_match": hits / max(len(pairs), 1), "exact_match_examples": len(pairs)}
