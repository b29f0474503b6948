"""Checkable tasks made from the built-in grammar, one per family that is not a plain language model.

- T5 (text to text): active voice -> passive voice, "The cat chased the dog." -> "The dog was chased by
  the cat.". Every output can be checked exactly with `to_passive`, and its shape with `is_passive`.
- BERT (classification): a well-formed sentence (label 1) against the same kind of sentence with its words
  shuffled (label 0). Shuffled sentences keep the surface of a sentence (capital first letter, final
  period), so only word order tells the classes apart.

`split_held_out` gives the train / held-out split for any of these lists, with no item on both sides.
"""

import random
from collections.abc import Hashable, Sequence
from typing import TypeVar

from onnxformer.builder.data.grammar import (
    TRANSITIVE_VERBS,
    generate_sentences,
    is_grammatical,
    parse,
    transitive_sentences,
)
from onnxformer.runtime.errors import ConfigError, InputError

WELL_FORMED = 1
SHUFFLED = 0

# A random permutation of a sentence of the grammar is almost never grammatical (the odd exception is
# swapping subject and object), so a handful of tries suffices; the cap only guards against inputs that
# cannot be shuffled into a non-sentence at all.
SHUFFLE_ATTEMPTS = 100

Item = TypeVar("Item", bound=Hashable)


def to_passive(sentence: str) -> str:
    """The passive voice of a transitive sentence; the place phrase stays at the end.

    "A small dog chased the red ball under the old table." -> "The red ball was chased by a small dog under
    the old table."
    """
    clause = parse(sentence)
    if clause is None:
        raise InputError(
            f"{sentence!r} is not a sentence of the built-in grammar; "
            "give one like 'The cat chased the dog.' (is_grammatical tells which are)"
        )
    if clause.object is None:
        raise InputError(
            f"{sentence!r} has no transitive verb ({clause.verb!r} takes no object), so it has no passive "
            f"voice; give a sentence with one of {TRANSITIVE_VERBS}"
        )
    return clause.render(voice="passive")


def is_passive(sentence: str) -> bool:
    """True exactly for the passive sentences `to_passive` can produce."""
    return parse(sentence, voice="passive") is not None


def passive_pairs(count: int, *, seed: int = 0) -> list[tuple[str, str]]:
    """(active, passive) pairs for the text-to-text task, the same list for the same seed."""
    return [(sentence, to_passive(sentence)) for sentence in transitive_sentences(count, seed=seed)]


def shuffle_words(sentence: str, rng: random.Random) -> str:
    """The sentence's words in a random order that the grammar rejects, written like a sentence.

    The first word is lowercased before shuffling and whichever word comes first is capitalised after, and the
    period goes back on the last word, so capitals and punctuation give nothing away.
    """
    if not isinstance(sentence, str) or not sentence.endswith(".") or not sentence[:-1].strip():
        raise InputError(f"{sentence!r} is not a sentence ending with '.'; give one like 'The cat sat.'")
    words = sentence[:-1].split(" ")
    if "" in words:
        raise InputError(f"{sentence!r} has a leading, trailing or double space; separate words by one space")
    words[0] = words[0][0].lower() + words[0][1:]
    for _ in range(SHUFFLE_ATTEMPTS):
        order = rng.sample(words, len(words))
        text = " ".join(order)
        shuffled = text[0].upper() + text[1:] + "."
        if shuffled != sentence and not is_grammatical(shuffled):
            return shuffled
    raise InputError(
        f"no order of the words of {sentence!r} differs from it and is ungrammatical; "
        "give a sentence of at least two different words"
    )


def classification_examples(count: int, *, seed: int = 0) -> list[tuple[str, int]]:
    """`count` (sentence, label) pairs, label WELL_FORMED (1) or SHUFFLED (0), in random order.

    Half of each (the well-formed side gets the extra one when count is odd). The two sides are shuffled
    from different generated sentences, so a model cannot pair a sentence with its own permutation.
    """
    sentences = generate_sentences(count, seed=seed)
    # A seed of its own for the shuffles: a string seed is hashed with SHA-512, the same in every process.
    rng = random.Random(f"classification:{seed}")
    n_well_formed = count - count // 2
    examples = [(sentence, WELL_FORMED) for sentence in sentences[:n_well_formed]]
    examples += [(shuffle_words(sentence, rng), SHUFFLED) for sentence in sentences[n_well_formed:]]
    rng.shuffle(examples)
    return examples


def split_held_out(
    items: Sequence[Item], *, fraction: float = 0.1, seed: int = 0
) -> tuple[list[Item], list[Item]]:
    """(train, held_out): duplicates dropped first, so no item is on both sides; order kept on each side.

    Short sentences of the grammar repeat often in a generated corpus ("The cat sat." has 1 chance in ~1600),
    and without the dedupe they would sit on both sides and flatter the held-out score.
    """
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"fraction must be between 0 and 1 (exclusive), got {fraction!r}; 0.1 is usual")
    unique = list(dict.fromkeys(items))
    n_held = max(1, round(len(unique) * fraction))
    if n_held >= len(unique):
        raise InputError(
            f"{len(unique)} distinct items are too few to hold {fraction:.0%} out and keep some to train on; "
            "give more items or a smaller fraction (`onnxformer train --val-fraction`)"
        )
    held = set(random.Random(seed).sample(range(len(unique)), n_held))
    train = [item for i, item in enumerate(unique) if i not in held]
    held_out = [item for i, item in enumerate(unique) if i in held]
    return train, held_out
