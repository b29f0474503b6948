"""Choosing the next token from logits: greedy, temperature, top-k, top-p, with a seeded numpy generator.

This one implementation serves both the runtime and the PyTorch reference loop in the builder, so given
the same logits they pick the same tokens. Logits from ONNX Runtime and PyTorch agree to ~1e-5, so seeded
sampling matches token for token unless a random draw falls within that distance of a boundary between
two tokens' cumulative probabilities (vanishingly rare; greedy decoding has no such caveat beyond exact
ties).
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from onnxformer.runtime.errors import ConfigError, InputError

MAX_TEMPERATURE = 1e300  # far past the point where sampling is uniform; a float, unlike a huge int


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0  # 0 means greedy (argmax)
    top_k: int = 0  # keep the k most likely tokens; 0 keeps all
    top_p: float = 1.0  # keep the smallest set whose probability reaches p (nucleus); 1 keeps all
    seed: int | None = None  # None draws fresh entropy

    def __post_init__(self) -> None:
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, int | float):
            raise ConfigError(f"temperature must be a number >= 0, got {self.temperature!r}")
        # `not <=` also refuses NaN; the upper bound keeps a huge int from overflowing the division.
        if self.temperature < 0 or not self.temperature <= MAX_TEMPERATURE:
            raise ConfigError(
                f"temperature must be >= 0 (0 = greedy) and at most {MAX_TEMPERATURE:g}, "
                f"got {self.temperature}"
            )
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ConfigError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, int | float):
            raise ConfigError(f"top_p must be a number in (0, 1], got {self.top_p!r}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1] (1 = off), got {self.top_p}")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0
        ):
            raise ConfigError(f"seed must be an integer >= 0 or None, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class Sampler:
    """One generator per batch row, each seeded with its row's seed: a row of a batch draws exactly the
    numbers it would draw alone, so batched sampling equals one-by-one sampling. One config serves every
    row; a sequence gives each row its own (the server batches requests that sample differently)."""

    def __init__(self, config: SamplingConfig | Sequence[SamplingConfig], batch: int) -> None:
        self.configs = [config] * batch if isinstance(config, SamplingConfig) else list(config)
        if len(self.configs) != batch:
            raise InputError(f"{len(self.configs)} sampling configs for a batch of {batch}; give one per row")
        self.rngs = [np.random.default_rng(row.seed) for row in self.configs]

    def __call__(self, logits: np.ndarray) -> npt.NDArray[np.int64]:
        """logits (B, V) -> token ids (B,) int64."""
        if logits.ndim != 2 or len(logits) != len(self.rngs):
            raise InputError(
                f"logits must have shape (B={len(self.rngs)}, V) for this sampler, got {logits.shape}"
            )
        chosen: npt.NDArray[np.int64] = np.argmax(logits, axis=-1).astype(np.int64)  # (B,)
        for row, config in enumerate(self.configs):
            if not config.greedy:
                chosen[row] = self._sample_row(logits[row], self.rngs[row], config)
        return chosen

    @staticmethod
    def _sample_row(logits: np.ndarray, rng: np.random.Generator, config: SamplingConfig) -> int:
        logits = logits.astype(np.float64)
        with np.errstate(over="ignore"):
            scaled = logits / config.temperature  # (V,)
            if (np.isinf(scaled) & np.isfinite(logits)).any():
                # A tiny temperature (say 1e-310) overflows; shifting by the maximum first keeps the
                # largest logit at 0 and sends the rest to -inf: the greedy limit such a temperature nears.
                scaled = (logits - logits.max()) / config.temperature  # (V,)
        order = np.argsort(-scaled, kind="stable")  # most likely first; ties keep the lower id first
        ranked = scaled[order]
        if config.top_k:
            ranked = ranked[: config.top_k]
        probs = np.exp(ranked - ranked[0])
        probs /= probs.sum()
        if config.top_p < 1:
            cumulative = np.cumsum(probs)
            keep = int(np.searchsorted(cumulative, config.top_p)) + 1  # reach p, then stop
            probs = probs[:keep] / probs[:keep].sum()
        cumulative = np.cumsum(probs)
        choice = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
        return int(order[min(choice, len(cumulative) - 1)])
