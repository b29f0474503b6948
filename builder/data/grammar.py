"""The built-in corpus: simple English sentences from a small closed grammar, made by our own code.

    S   -> NP VP "."                      The cat sat on the mat.
    NP  -> Det [Adj] Noun                 A small dog chased the red ball under the old table.
    VP  -> IntransVerb [PP] | TransVerb NP [PP]
    PP  -> Prep NP

A transitive clause also has a passive voice, "NP was Participle by NP [PP].", the target language of the
text-to-text task. "was" and "by" are not words of the active grammar, so no passive sentence is a
grammatical active one and the two recognisers never overlap.

Why so small: a tiny Transformer trained for a few minutes on two CPU cores should learn the language almost
perfectly, so a wrong answer after training points at a bug rather than at capacity. Yet the grammar has
2 * 10 * 14 = 280 noun phrases and about 280 * 7 * 1681 * 281 = 9.3e8 distinct sentences, far more than a
training run sees, so held-out sentences measure generalisation, not recall.

The article "a" is written "an" before a vowel ("an old table"), as in English; that is the one place where a
word's spelling depends on its neighbour, and the recogniser checks it.
"""

import random
from dataclasses import dataclass
from typing import Literal

from onnxformer.runtime.errors import ConfigError, InputError

Determiner = Literal["the", "a"]
DETERMINERS: tuple[Determiner, ...] = ("the", "a")
NOUNS: tuple[str, ...] = (
    "cat", "dog", "mat", "ball", "table", "bird", "box",
    "chair", "fox", "hat", "owl", "mouse", "rug", "cup",
)  # fmt: skip
ADJECTIVES: tuple[str, ...] = ("small", "big", "red", "old", "happy", "little", "black", "orange", "soft")
INTRANSITIVE_VERBS: tuple[str, ...] = ("sat", "slept", "ran", "jumped", "waited", "stood", "played")
# Past tense -> past participle. Two are irregular so that the passive is not a pure copy of the verb.
PARTICIPLES: dict[str, str] = {
    "chased": "chased",
    "saw": "seen",
    "found": "found",
    "pushed": "pushed",
    "watched": "watched",
    "carried": "carried",
    "bit": "bitten",
}
TRANSITIVE_VERBS: tuple[str, ...] = tuple(PARTICIPLES)
# No "by": it would make "chased by the cat by the table" ambiguous in the passive.
PREPOSITIONS: tuple[str, ...] = ("on", "under", "near", "behind", "beside", "over")
VOWELS = frozenset("aeiou")

Voice = Literal["active", "passive"]
VOICES: tuple[Voice, ...] = ("active", "passive")

# The probability of each optional part: about half the sentences have an adjective on a given noun
# phrase, a transitive verb, a prepositional phrase.
OPTIONAL = 0.5

_VERB_OF_PARTICIPLE = {participle: verb for verb, participle in PARTICIPLES.items()}


@dataclass(frozen=True)
class NounPhrase:
    determiner: Determiner
    adjective: str | None
    noun: str

    def __post_init__(self) -> None:
        _check_word(self.determiner, DETERMINERS, "determiner")
        if self.adjective is not None:
            _check_word(self.adjective, ADJECTIVES, "adjective")
        _check_word(self.noun, NOUNS, "noun")

    def words(self) -> list[str]:
        rest = [self.noun] if self.adjective is None else [self.adjective, self.noun]
        article = "an" if self.determiner == "a" and rest[0][0] in VOWELS else self.determiner
        return [article, *rest]


@dataclass(frozen=True)
class PrepPhrase:
    preposition: str
    object: NounPhrase

    def __post_init__(self) -> None:
        _check_word(self.preposition, PREPOSITIONS, "preposition")

    def words(self) -> list[str]:
        return [self.preposition, *self.object.words()]


@dataclass(frozen=True)
class Clause:
    """One sentence's parse: who did what (to whom), where. `object` is None for an intransitive verb."""

    subject: NounPhrase
    verb: str
    object: NounPhrase | None
    place: PrepPhrase | None

    def __post_init__(self) -> None:
        if self.object is None:
            _check_word(self.verb, INTRANSITIVE_VERBS, "intransitive verb (a clause without an object)")
        else:
            _check_word(self.verb, TRANSITIVE_VERBS, "transitive verb (a clause with an object)")

    def render(self, *, voice: Voice = "active") -> str:
        """The sentence as text: first word capitalised, single spaces, a final period."""
        place = [] if self.place is None else self.place.words()
        if voice == "active":
            obj = [] if self.object is None else self.object.words()
            words = [*self.subject.words(), self.verb, *obj, *place]
        elif voice == "passive":
            if self.object is None:
                raise InputError(
                    f"the verb {self.verb!r} takes no object, so the clause has no passive voice; "
                    f"use a clause with one of the transitive verbs {TRANSITIVE_VERBS}"
                )
            agent = self.subject.words()
            words = [*self.object.words(), "was", PARTICIPLES[self.verb], "by", *agent, *place]
        else:
            raise ConfigError(f"voice must be one of {VOICES}, got {voice!r}")
        text = " ".join(words)
        return text[0].upper() + text[1:] + "."


def generate_sentences(count: int, *, seed: int = 0) -> list[str]:
    """`count` sentences of the grammar (repeats possible), the same list for the same seed."""
    _check_count(count)
    rng = random.Random(seed)
    return [_random_clause(rng, transitive=None).render() for _ in range(count)]


def transitive_sentences(count: int, *, seed: int = 0) -> list[str]:
    """`count` sentences whose verb takes an object (the ones that have a passive voice)."""
    _check_count(count)
    rng = random.Random(seed)
    return [_random_clause(rng, transitive=True).render() for _ in range(count)]


def parse(sentence: str, *, voice: Voice = "active") -> Clause | None:
    """The clause a sentence of the grammar (in the given voice) expresses, or None if it is not one.

    Strict about the surface: the first word capitalised and no other, single spaces, the period attached
    to the last word, nothing before or after. A recursive-descent parser over the word list.
    """
    if voice not in VOICES:
        raise ConfigError(f"voice must be one of {VOICES}, got {voice!r}")
    words = _words(sentence)
    if words is None:
        return None
    first = _noun_phrase(words, 0)
    if first is None:
        return None
    first_np, i = first
    if voice == "active":
        clause_end = _active_predicate(words, i, subject=first_np)
    else:
        clause_end = _passive_predicate(words, i, patient=first_np)
    if clause_end is None:
        return None
    clause, i = clause_end
    if i == len(words):
        return clause
    place = _prep_phrase(words, i)
    if place is None or place[1] != len(words):
        return None
    return Clause(clause.subject, clause.verb, clause.object, place[0])


def is_grammatical(sentence: str) -> bool:
    """True exactly for the sentences `generate_sentences` can produce (active voice)."""
    return parse(sentence) is not None


def _words(sentence: object) -> list[str] | None:
    """The lowercase words of a sentence-shaped string, or None if its surface breaks the conventions."""
    if not isinstance(sentence, str) or not sentence.endswith("."):
        return None
    words = sentence[:-1].split(" ")
    first = words[0]
    if not first[:1].isascii() or not first[:1].isupper():
        return None
    words[0] = first[0].lower() + first[1:]
    # An empty word comes from a double, leading or trailing space; the parser rejects it as unknown.
    return words


def _noun_phrase(words: list[str], i: int) -> tuple[NounPhrase, int] | None:
    if i >= len(words) or words[i] not in ("the", "a", "an"):
        return None
    article = words[i]
    i += 1
    adjective = None
    if i < len(words) and words[i] in ADJECTIVES:
        adjective = words[i]
        i += 1
    if i >= len(words) or words[i] not in NOUNS:
        return None
    phrase = NounPhrase("the" if article == "the" else "a", adjective, words[i])
    if phrase.words()[0] != article:  # "a" before a vowel or "an" before a consonant
        return None
    return phrase, i + 1


def _prep_phrase(words: list[str], i: int) -> tuple[PrepPhrase, int] | None:
    if i >= len(words) or words[i] not in PREPOSITIONS:
        return None
    obj = _noun_phrase(words, i + 1)
    if obj is None:
        return None
    return PrepPhrase(words[i], obj[0]), obj[1]


def _active_predicate(words: list[str], i: int, *, subject: NounPhrase) -> tuple[Clause, int] | None:
    if i >= len(words):
        return None
    verb = words[i]
    if verb in INTRANSITIVE_VERBS:
        return Clause(subject, verb, None, None), i + 1
    if verb in TRANSITIVE_VERBS:
        obj = _noun_phrase(words, i + 1)
        if obj is not None:
            return Clause(subject, verb, obj[0], None), obj[1]
    return None


def _passive_predicate(words: list[str], i: int, *, patient: NounPhrase) -> tuple[Clause, int] | None:
    if words[i : i + 1] != ["was"] or i + 2 >= len(words) or words[i + 2] != "by":
        return None
    verb = _VERB_OF_PARTICIPLE.get(words[i + 1])
    agent = _noun_phrase(words, i + 3)
    if verb is None or agent is None:
        return None
    return Clause(agent[0], verb, patient, None), agent[1]


def _random_noun_phrase(rng: random.Random) -> NounPhrase:
    determiner = rng.choice(DETERMINERS)
    adjective = rng.choice(ADJECTIVES) if rng.random() < OPTIONAL else None
    return NounPhrase(determiner, adjective, rng.choice(NOUNS))


def _random_clause(rng: random.Random, *, transitive: bool | None) -> Clause:
    subject = _random_noun_phrase(rng)
    if transitive is None:
        transitive = rng.random() < OPTIONAL
    if transitive:
        verb, obj = rng.choice(TRANSITIVE_VERBS), _random_noun_phrase(rng)
    else:
        verb, obj = rng.choice(INTRANSITIVE_VERBS), None
    place = (
        PrepPhrase(rng.choice(PREPOSITIONS), _random_noun_phrase(rng)) if rng.random() < OPTIONAL else None
    )
    return Clause(subject, verb, obj, place)


def _check_word(word: str, allowed: tuple[str, ...], role: str) -> None:
    if word not in allowed:
        raise InputError(f"{word!r} is not a {role} of the built-in grammar; use one of {allowed}")


def _check_count(count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ConfigError(f"count must be a whole number >= 0, got {count!r}")
