"""GPT's task: next-token prediction on sentences, each framed as <s> sentence </s>.

Quality on the built-in corpus: sample continuations (temperature 1.0) of held-out prompts (the first one to
three words of held-out sentences) and count how many the grammar recogniser accepts. On the user's own
text there is no recogniser; the same samples are shown, with the share that copy a training line word
for word (a model that only recites its training data scores high there).
"""

import math
import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from onnxformer.builder.data import generate_sentences, is_grammatical, read_corpus_file, split_held_out
from onnxformer.builder.families import GPT
from onnxformer.builder.generation import generate
from onnxformer.builder.tokenizer import decode, encode, special_tokens
from onnxformer.builder.training.batching import IGNORE, Truncation, draw, pad, shifted_labels
from onnxformer.runtime.sampling import SamplingConfig

BUILTIN_SENTENCES = 20_000
QUALITY_SAMPLES = 200
SHOWN_SAMPLES = 5


@dataclass
class GPTTask:
    train_texts: list[str]
    held_out_texts: list[str]
    builtin: bool  # the grammar recogniser applies

    @classmethod
    def builtin_corpus(cls, seed: int, *, val_fraction: float = 0.1) -> "GPTTask":
        sentences = generate_sentences(BUILTIN_SENTENCES, seed=seed)
        train, held = split_held_out(sentences, fraction=val_fraction, seed=seed)
        return cls(train, held, builtin=True)

    @classmethod
    def from_texts(cls, texts: list[str], seed: int, *, val_fraction: float = 0.1) -> "GPTTask":
        train, held = split_held_out(texts, fraction=val_fraction, seed=seed)
        return cls(train, held, builtin=False)

    @classmethod
    def from_file(cls, path: str, seed: int, *, val_fraction: float = 0.1) -> "GPTTask":
        """The user's file: one text per line."""
        return cls.from_texts(read_corpus_file(path), seed, val_fraction=val_fraction)

    def tokenizer_texts(self) -> list[str]:
        return self.train_texts

    def train_items(self) -> int:
        return len(self.train_texts)

    def prepare(self, tokenizer: Tokenizer, max_len: int) -> Truncation:
        self.tokenizer = tokenizer
        self.special = special_tokens(tokenizer)
        self.max_len = max_len
        # A frame holds <s> text </s> and the model reads all but its last token: max_len + 1 in all.
        truncation = Truncation(limit=max_len - 1)

        def frame(text: str) -> list[int]:
            return [self.special.bos, *truncation.clip(encode(tokenizer, text)), self.special.eos]

        self.train_ids = [frame(t) for t in self.train_texts]
        self.held_out_ids = [frame(t) for t in self.held_out_texts]
        return truncation

    def batch(self, indices: list[int], *, held_out: bool = False) -> dict[str, torch.Tensor]:
        source = self.held_out_ids if held_out else self.train_ids
        ids, mask = pad([source[i] for i in indices], self.special.pad)  # (B, T + 1)
        return {"input_ids": ids[:, :-1], "attention_mask": mask[:, :-1], "labels": shifted_labels(ids, mask)}

    def sample_batch(self, generator: torch.Generator, batch_size: int) -> dict[str, torch.Tensor]:
        return self.batch(draw(len(self.train_ids), batch_size, generator))

    def normalisers(self, batch: dict[str, torch.Tensor]) -> dict[str, int]:
        """What each loss term is divided by, counted on the whole (global) batch."""
        return {"tokens": int((batch["labels"] != IGNORE).sum())}

    def loss_sums(self, model: GPT, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        logits = model(batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # (B, T, V)
        flat = logits.flatten(0, 1)  # (B * T, V)
        return {
            "tokens": F.cross_entropy(flat, batch["labels"].flatten(), ignore_index=IGNORE, reduction="sum")
        }

    def tokens_in(self, batch: dict[str, torch.Tensor]) -> int:
        return int(batch["attention_mask"].sum())

    @torch.no_grad()
    def evaluate(self, model: GPT, *, limit: int = 1000) -> dict[str, float]:
        """Held-out loss (per token) and perplexity."""
        model.eval()
        total, count = 0.0, 0
        indices = list(range(min(limit, len(self.held_out_ids))))
        for start in range(0, len(indices), 128):
            batch = self.batch(indices[start : start + 128], held_out=True)
            total += float(self.loss_sums(model, batch)["tokens"])
            count += self.normalisers(batch)["tokens"]
        loss = total / max(count, 1)
        return {"val_loss": loss, "val_perplexity": math.exp(min(loss, 50.0))}

    def quality(self, model: GPT, *, seed: int, samples: int = QUALITY_SAMPLES) -> dict[str, float]:
        """Sampled continuations of held-out prompts: the share the grammar accepts (built-in corpus), or
        the share that repeat a training line verbatim (the user's text)."""
        self.samples: list[str] = []
        if samples < 1:
            return {}
        rng = random.Random(seed)
        sentences = [rng.choice(self.held_out_texts) for _ in range(samples)]
        prompts = [" ".join(s.split()[: rng.randint(1, 3)]) for s in sentences]
        texts = []
        for index, prompt in enumerate(prompts):
            # One call per prompt, each with its own seed: rows of one batched call would share a seed
            # (a row samples what it would alone), and equal prompts would then give equal samples.
            (result,) = generate(
                model,
                [[self.special.bos, *encode(self.tokenizer, prompt)][: self.max_len]],
                max_new_tokens=self.max_len,
                sampling=SamplingConfig(temperature=1.0, seed=seed * samples + index),
                stop_tokens={self.special.eos},
                pad_id=self.special.pad,
            )
            texts.append(prompt + decode(self.tokenizer, result.tokens))
        self.samples = texts[:SHOWN_SAMPLES]
        if self.builtin:
            accepted = sum(is_grammatical(text) for text in texts)
            return {"grammatical_rate": accepted / len(texts), "grammatical_samples": len(texts)}
        seen = set(self.train_texts)
        copied = sum(text.strip() in seen for text in texts)
        return {"copied_rate": copied / len(texts), "samples": len(texts)}
