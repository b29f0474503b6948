"""llama.cpp through llama-cpp-python's ctypes bindings (its low-level API, `llama_cpp.llama_cpp`) on a GGUF
file, in .venv-genai with PYTHONPATH at the unpacked bindings and LLAMA_CPP_LIB_PATH at the libraries
`make llamacpp` built (benchmarks/peers/envs.py sets both).

A forward pass is one `llama_decode` of a `llama_batch`: the prompt's tokens (only the last one's logits
asked for), then one token per sequence and step; greedy picks the argmax of the logits, as our runtime,
genai and transformers do. Batch 4 is one llama_batch of four sequences (seq ids 0..3), each in its own
stream of the KV cache (llama.cpp's default, non-unified cache). One context per batch size, made while
preparing; its cache is emptied before every call (`llama_memory_clear`, metadata only).

The quality comparison's teacher-forced logits: one llama_decode of a row's tokens with the logits of
every position asked for (`llama_get_logits`: one row of the vocabulary per position asked)."""

import json
import os
from pathlib import Path

import numpy as np
from calls import Call, TimedSteps

CONTEXT = 2048  # tokens per sequence: the model's max_position_embeddings


def versions() -> dict:
    from importlib.metadata import version

    import llama_cpp

    info = json.loads((Path(os.environ["LLAMA_CPP_LIB_PATH"]).parents[1] / "build-info.json").read_text())
    return {
        **info,
        "llama-cpp-python (bindings)": llama_cpp.__version__,
        # The CPU features llama.cpp was built with and uses (AVX2, AVX512, VNNI, AMX, ...).
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "numpy": version("numpy"),
    }


class Batch:
    """A llama_batch of `rows` sequences (seq ids 0..rows-1) and `length` tokens each, logits asked for
    the last token of every sequence (`every`: of every token): fill() sets its tokens and positions
    before a llama_decode."""

    def __init__(self, ll, rows: int, length: int, *, every: bool = False) -> None:
        self.ll = ll
        self.rows, self.length = rows, length
        size = rows * length
        self.batch = ll.llama_batch_init(size, 0, 1)
        self.batch.n_tokens = size
        self.tokens = np.ctypeslib.as_array(self.batch.token, shape=(size,))
        self.positions = np.ctypeslib.as_array(self.batch.pos, shape=(size,))
        np.ctypeslib.as_array(self.batch.n_seq_id, shape=(size,))[:] = 1
        outputs = np.ctypeslib.as_array(self.batch.logits, shape=(rows, length))
        outputs[:] = 1 if every else 0
        outputs[:, -1] = 1
        for i in range(size):
            self.batch.seq_id[i][0] = i // length

    def fill(self, ids: np.ndarray, start: int) -> None:
        """ids (rows, length) at positions start .. start + length - 1 of every sequence."""
        self.tokens[:] = ids.reshape(-1)
        self.positions[:] = np.tile(np.arange(start, start + self.length, dtype=np.int32), self.rows)

    def __del__(self) -> None:
        self.ll.llama_batch_free(self.batch)


class Adapter:
    def __init__(self, *, model: str, threads: int, kv_type: str, flash_attn: str) -> None:
        import llama_cpp.llama_cpp as ll

        self.ll = ll
        ll.llama_backend_init()
        self.model = ll.llama_model_load_from_file(model.encode(), ll.llama_model_default_params())
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {model} (see the worker's log)")
        self.vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(self.model))
        self.threads = threads
        types = {"f32": ll.GGML_TYPE_F32, "f16": ll.GGML_TYPE_F16}
        modes = {"off": ll.LLAMA_FLASH_ATTN_TYPE_DISABLED, "auto": ll.LLAMA_FLASH_ATTN_TYPE_AUTO}
        self.kv_type, self.flash_attn = types[kv_type], modes[flash_attn]
        self.contexts: dict[int, object] = {}

    def _context(self, rows: int):
        """The context for batches of `rows` sequences: CONTEXT tokens of KV cache each."""
        if rows not in self.contexts:
            ll = self.ll
            params = ll.llama_context_default_params()
            params.n_ctx = CONTEXT * rows
            params.n_seq_max = rows
            # The same thread count as every other tool, for single tokens and for prompts alike.
            params.n_threads = params.n_threads_batch = self.threads
            params.type_k = params.type_v = self.kv_type
            params.flash_attn_type = self.flash_attn
            context = ll.llama_init_from_model(self.model, params)
            if not context:
                raise RuntimeError(f"llama.cpp could not make a context of {rows} sequences")
            self.contexts[rows] = context
        return self.contexts[rows]

    def _forward(self, context, batch: Batch) -> np.ndarray:
        """One llama_decode of the batch; the greedy token of each sequence, (rows,)."""
        status = self.ll.llama_decode(context, batch.batch)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        logits = np.ctypeslib.as_array(self.ll.llama_get_logits(context), shape=(batch.rows, self.vocab))
        return logits.argmax(-1).astype(np.int32)  # (B,)

    def _clear(self, context) -> None:
        self.ll.llama_memory_clear(self.ll.llama_get_memory(context), False)

    def logits(self, row: list[int]) -> np.ndarray:
        """The logits at every position of `row`, one llama_decode from an empty cache: (T, V)."""
        context = self._context(1)
        batch = Batch(self.ll, 1, len(row), every=True)
        batch.fill(np.asarray([row], dtype=np.int32), 0)
        self._clear(context)
        status = self.ll.llama_decode(context, batch.batch)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        logits = np.ctypeslib.as_array(self.ll.llama_get_logits(context), shape=(len(row), self.vocab))
        return logits.copy()  # the context's buffer, overwritten by the next decode

    def prepare(self, kind: str, **args) -> Call:
        if kind == "logits":
            rows = args["rows"]
            return Call(lambda: np.concatenate([self.logits(row) for row in rows]))
        ids = np.asarray(args["ids"], dtype=np.int32)  # (B, T)
        rows, length = ids.shape
        context = self._context(rows)
        prompt, step = Batch(self.ll, rows, length), Batch(self.ll, rows, 1)
        prompt.fill(ids, 0)
        if kind in ("prefill", "decode"):
            steps = args.get("steps", 0)

            def run():
                self._clear(context)
                yield False
                token = self._forward(context, prompt)  # the prefill: the prompt's pass and the first pick
                yield kind == "prefill"
                for position in range(length, length + steps):
                    step.fill(token[:, None], position)
                    token = self._forward(context, step)
                    yield True

            return TimedSteps(run)
        if kind == "generate":
            new = args["new"]

            def run():
                self._clear(context)
                tokens = [self._forward(context, prompt)]
                for position in range(length, length + new - 1):  # the last token needs no pass
                    step.fill(tokens[-1][:, None], position)
                    tokens.append(self._forward(context, step))
                return np.stack(tokens, axis=1).tolist()  # (B, new)

            return Call(run)
        raise ValueError(f"llama.cpp's adapter has no {kind!r} workload")
