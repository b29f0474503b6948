"""T5's task: text to text. Built in: active to passive voice; from a file: source<TAB>target pairs.

Sources are framed `source </s>`, targets `<s> target </s>` (teacher forcing: the decoder reads the target
shifted right and predicts it). Quality: exact match of greedy outputs on held-out pairs.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from onnxformer.builder.data import passive_pairs, read_pairs_file, split_held_out
from onnxformer.builder.families import T5
from onnxformer.builder.generation import generate_seq2seq
from onnxformer.builder.tokenizer import decode, encode, special_tokens
from onnxformer.builder.training.batching import IGNORE, draw, pad, shifted_labels

BUILTIN_PAIRS = 12_000
QUALITY_EXAMPLES = 500


@dataclass
class T5Task:
    train_pairs: list[tuple[str, str]]
    held_out_pairs: list[tuple[str, str]]

    @classmethod
    def builtin_corpus(cls, seed: int) -> "T5Task":
        train, held = split_held_out(passive_pairs(BUILTIN_PAIRS, seed=seed), seed=seed)
        return cls(train, held)

    @classmethod
    def from_pairs(cls, pairs: list[tuple[str, str]], seed: int) -> "T5Task":
        train, held = split_held_out(pairs, seed=seed)
        return cls(train, held)

    @classmethod
    def from_file(cls, path: str, seed: int) -> "T5Task":
        """The user's file: source<TAB>target per line."""
        return cls.from_pairs(read_pairs_file(path), seed)

    def tokenizer_texts(self) -> list[str]:
        return [text for pair in self.train_pairs for text in pair]

    def prepare(self, tokenizer: Tokenizer, max_len: int) -> None:
        self.tokenizer = tokenizer
        self.special = special_tokens(tokenizer)
        self.max_len = max_len

        def frame(source: str, target: str) -> tuple[list[int], list[int]]:
            source_ids = [*encode(tokenizer, source)[: max_len - 1], self.special.eos]
            target_ids = [self.special.bos, *encode(tokenizer, target)[: max_len - 1], self.special.eos]
            return source_ids, target_ids

        self.train_ids = [frame(s, t) for s, t in self.train_pairs]
        self.held_out_ids = [frame(s, t) for s, t in self.held_out_pairs]

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

    def loss(self, model: T5, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = model(
            batch["input_ids"],
            batch["decoder_input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_attention_mask=batch["decoder_attention_mask"],
        ).logits  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=IGNORE)

    def tokens_in(self, batch: dict[str, torch.Tensor]) -> int:
        return int(batch["attention_mask"].sum() + batch["decoder_attention_mask"].sum())

    @torch.no_grad()
    def evaluate(self, model: T5, *, limit: int = 1000) -> dict[str, float]:
        model.eval()
        indices = list(range(min(limit, len(self.held_out_ids))))
        total = 0.0
        for start in range(0, len(indices), 128):
            chunk = indices[start : start + 128]
            total += float(self.loss(model, self.batch(chunk, held_out=True))) * len(chunk)
        return {"val_loss": total / max(len(indices), 1)}

    def quality(self, model: T5, *, seed: int, samples: int = QUALITY_EXAMPLES) -> dict[str, float]:
        """Exact match of greedy outputs on up to `samples` held-out pairs."""
        pairs = self.held_out_pairs[:samples]
        sources = [ids for ids, _ in self.held_out_ids[: len(pairs)]]
        hits = 0
        self.samples = []
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
