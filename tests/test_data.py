"""The built-in grammar corpus, the tasks made from it, and reading the user's files."""

import random
from collections import Counter
from pathlib import Path

import pytest

from onnxformer.builder.data import (
    ADJECTIVES,
    DETERMINERS,
    INTRANSITIVE_VERBS,
    NOUNS,
    PARTICIPLES,
    PREPOSITIONS,
    SHUFFLED,
    TRANSITIVE_VERBS,
    WELL_FORMED,
    Clause,
    NounPhrase,
    PrepPhrase,
    classification_examples,
    generate_sentences,
    is_grammatical,
    is_passive,
    parse,
    passive_pairs,
    read_corpus_file,
    read_pairs_file,
    shuffle_words,
    split_held_out,
    to_passive,
    transitive_sentences,
)
from onnxformer.runtime.errors import ConfigError, InputError

CORPUS = generate_sentences(5000, seed=0)
WORD_LISTS = {
    "determiners": DETERMINERS,
    "nouns": NOUNS,
    "adjectives": ADJECTIVES,
    "intransitive verbs": INTRANSITIVE_VERBS,
    "transitive verbs": TRANSITIVE_VERBS,
    "prepositions": PREPOSITIONS,
}


def words_of(sentence: str) -> Counter[str]:
    return Counter(sentence[:-1].lower().split(" "))


# ---------------------------------------------------------------------------------------------------------
# The vocabulary.
# ---------------------------------------------------------------------------------------------------------


def test_vocabulary_is_small_closed_and_lowercase_ascii() -> None:
    assert 12 <= len(NOUNS) <= 16 and 8 <= len(ADJECTIVES) <= 10
    assert 6 <= len(INTRANSITIVE_VERBS) <= 8 and 6 <= len(TRANSITIVE_VERBS) <= 8
    assert len(PREPOSITIONS) == 6 and DETERMINERS == ("the", "a")
    every = [word for words in WORD_LISTS.values() for word in words]
    assert all(word.isascii() and word.isalpha() and word.islower() for word in every)
    assert len(every) == len(set(every)), "a word in two categories would make parsing ambiguous"
    assert {"cat", "sat", "on", "mat"} <= set(every)


def test_passive_words_are_outside_the_active_vocabulary() -> None:
    every = {word for words in WORD_LISTS.values() for word in words}
    assert len(set(PARTICIPLES.values())) == len(PARTICIPLES), "a participle must name one verb"
    assert {"was", "by", "an"}.isdisjoint(every)
    assert set(PARTICIPLES.values()).isdisjoint(every - set(TRANSITIVE_VERBS))


# ---------------------------------------------------------------------------------------------------------
# Generation.
# ---------------------------------------------------------------------------------------------------------


def test_generation_is_deterministic_per_seed_and_uses_no_global_state() -> None:
    random.seed(1)
    state = random.getstate()
    first = generate_sentences(200, seed=7)
    assert random.getstate() == state
    random.seed(2)
    assert generate_sentences(200, seed=7) == first
    assert generate_sentences(200, seed=8) != first
    assert transitive_sentences(50, seed=7) == transitive_sentences(50, seed=7)
    assert transitive_sentences(50, seed=7) != transitive_sentences(50, seed=8)


def test_every_generated_sentence_is_accepted_and_reads_like_a_sentence() -> None:
    for sentence in CORPUS:
        assert is_grammatical(sentence), sentence
        assert sentence[0].isupper() and sentence[1:] == sentence[1:].lower()
        assert sentence.endswith(".") and not sentence.endswith(" .") and "  " not in sentence
        assert parse(sentence).render() == sentence


def test_generation_uses_the_whole_vocabulary_in_every_shape() -> None:
    seen = Counter(word for sentence in CORPUS for word in words_of(sentence))
    every = {word for words in WORD_LISTS.values() for word in words} | {"an"}
    assert every <= set(seen), f"never generated: {every - set(seen)}"
    lengths = Counter(len(sentence.split(" ")) for sentence in CORPUS)
    assert min(lengths) == 3 and max(lengths) == 11
    transitive = sum(parse(sentence).object is not None for sentence in CORPUS)
    assert 0.4 < transitive / len(CORPUS) < 0.6
    assert len(set(CORPUS)) > 0.8 * len(CORPUS), "the corpus should be mostly distinct sentences"


def test_transitive_sentences_all_have_an_object() -> None:
    sentences = transitive_sentences(500, seed=3)
    assert all(parse(sentence).object is not None for sentence in sentences)


@pytest.mark.parametrize("count", [-1, 2.5, "10", True])
def test_bad_count_is_a_config_error(count: object) -> None:
    with pytest.raises(ConfigError, match="count"):
        generate_sentences(count)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------
# The recogniser.
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sentence",
    [
        "The cat sat on the mat.",
        "A small dog chased the red ball under the old table.",
        "An owl slept.",
        "A cat saw an old fox near an orange box.",
        "The little bird bit a soft hat.",
    ],
)
def test_recogniser_accepts(sentence: str) -> None:
    assert is_grammatical(sentence)


@pytest.mark.parametrize(
    "sentence",
    [
        "",
        ".",
        "The cat sat",  # no period
        "The cat sat on the mat!",
        "The cat sat .",  # period not attached
        "The cat sat..",
        "the cat sat.",  # lowercase start
        "THE cat sat.",
        "The Cat sat.",  # a capital inside
        "The  cat sat.",  # double space
        " The cat sat.",
        "The cat sat. ",
        "The cat sat.\n",
        "The cat\tsat.",
        "The cat zoomed.",  # unknown word
        "The cat sat on the moon.",
        "The cat sat on the mat on the rug.",  # extra words
        "The cat sat the mat.",  # intransitive verb with an object
        "The cat chased.",  # transitive verb without one
        "The cat sat on.",
        "The old small cat sat.",  # two adjectives
        "A old cat sat.",  # a / an agreement
        "An cat sat.",
        "Cat the sat.",  # shuffled
        "Sat the cat.",
        "The dog was chased by the cat.",  # passive voice
        "The cat sat on the mat. The dog ran.",
        "Ｔhe cat sat.",  # a full-width capital
    ],
)
def test_recogniser_rejects(sentence: str) -> None:
    assert not is_grammatical(sentence)


@pytest.mark.parametrize("value", [None, 5, b"The cat sat."])
def test_recogniser_rejects_what_is_not_text(value: object) -> None:
    assert not is_grammatical(value)  # type: ignore[arg-type]


def test_recogniser_rejects_shuffled_sentences() -> None:
    rng = random.Random(0)
    for sentence in CORPUS[:1000]:
        shuffled = shuffle_words(sentence, rng)
        assert not is_grammatical(shuffled), shuffled
        assert words_of(shuffled) == words_of(sentence)


def test_parse_returns_the_clause() -> None:
    clause = parse("A small dog chased the red ball under the old table.")
    assert clause == Clause(
        subject=NounPhrase("a", "small", "dog"),
        verb="chased",
        object=NounPhrase("the", "red", "ball"),
        place=PrepPhrase("under", NounPhrase("the", "old", "table")),
    )
    assert parse("The cat sat on the mat.") == Clause(
        NounPhrase("the", None, "cat"), "sat", None, PrepPhrase("on", NounPhrase("the", None, "mat"))
    )


def test_a_clause_with_words_from_outside_the_grammar_is_an_input_error() -> None:
    with pytest.raises(InputError, match="'elephant' is not a noun"):
        NounPhrase("the", None, "elephant")
    with pytest.raises(InputError, match="intransitive verb"):
        Clause(NounPhrase("the", None, "cat"), "chased", None, None)


def test_unknown_voice_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="voice must be one of"):
        parse("The cat sat.", voice="middle")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------
# Active -> passive (T5).
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("active", "passive"),
    [
        ("The cat chased the dog.", "The dog was chased by the cat."),
        (
            "A small dog chased the red ball under the old table.",
            "The red ball was chased by a small dog under the old table.",
        ),
        ("The dog bit a cat.", "A cat was bitten by the dog."),
        ("An owl saw the old fox near a box.", "The old fox was seen by an owl near a box."),
        ("The cat found an orange hat.", "An orange hat was found by the cat."),
    ],
)
def test_to_passive(active: str, passive: str) -> None:
    assert to_passive(active) == passive
    assert is_passive(passive) and not is_grammatical(passive)
    assert not is_passive(active)


def test_intransitive_or_ungrammatical_sentences_have_no_passive() -> None:
    with pytest.raises(InputError, match=r"no transitive verb.*'sat' takes no object"):
        to_passive("The cat sat on the mat.")
    with pytest.raises(InputError, match="not a sentence of the built-in grammar"):
        to_passive("Dog the chased cat the.")


@pytest.mark.parametrize(
    "sentence",
    [
        "The dog was chased by.",
        "The dog was chased the cat.",
        "The dog was sat by the cat.",  # an intransitive verb has no participle here
        "The dog was chased by the cat",
        "the dog was chased by the cat.",
        "The dog is chased by the cat.",
        "The dog was chased by the cat on the mat near the rug.",
    ],
)
def test_passive_recogniser_rejects(sentence: str) -> None:
    assert not is_passive(sentence)


def test_passive_pairs_are_deterministic_and_checkable() -> None:
    pairs = passive_pairs(1000, seed=4)
    assert pairs == passive_pairs(1000, seed=4)
    assert pairs != passive_pairs(1000, seed=5)
    for source, target in pairs:
        assert is_grammatical(source) and is_passive(target) and not is_grammatical(target)
        assert parse(target, voice="passive") == parse(source)


# ---------------------------------------------------------------------------------------------------------
# Well formed vs shuffled (BERT).
# ---------------------------------------------------------------------------------------------------------


def test_shuffle_keeps_the_surface_of_a_sentence() -> None:
    rng = random.Random(5)
    shuffled = shuffle_words("A small dog chased the red ball under the old table.", rng)
    assert shuffled[0].isupper() and shuffled.endswith(".") and "  " not in shuffled
    assert shuffled[1:] == shuffled[1:].lower()
    assert shuffle_words("The cat sat.", random.Random(1)) == shuffle_words("The cat sat.", random.Random(1))


@pytest.mark.parametrize("sentence", ["", "Cat.", "The the.", "no period", " cat sat.", "The  cat sat."])
def test_what_cannot_be_shuffled_is_an_input_error(sentence: str) -> None:
    with pytest.raises(InputError):
        shuffle_words(sentence, random.Random(0))


@pytest.mark.parametrize("count", [1000, 999])
def test_classification_examples_are_balanced_and_labelled_by_the_recogniser(count: int) -> None:
    examples = classification_examples(count, seed=6)
    labels = Counter(label for _, label in examples)
    assert len(examples) == count and abs(labels[WELL_FORMED] - labels[SHUFFLED]) <= 1
    for sentence, label in examples:
        assert is_grammatical(sentence) == (label == WELL_FORMED), (sentence, label)
        assert sentence[0].isupper() and sentence.endswith(".")
    assert examples == classification_examples(count, seed=6)
    assert examples != classification_examples(count, seed=7)
    assert [label for _, label in examples[:20]] != sorted(label for _, label in examples[:20])


# ---------------------------------------------------------------------------------------------------------
# The held-out split.
# ---------------------------------------------------------------------------------------------------------


def test_held_out_split_is_disjoint_deterministic_and_deduplicated() -> None:
    assert len(set(CORPUS)) < len(CORPUS), "the corpus should repeat some short sentences"
    train, held = split_held_out(CORPUS, fraction=0.1, seed=0)
    assert set(train).isdisjoint(held)
    assert len(train) == len(set(train)) and len(held) == len(set(held))
    assert set(train) | set(held) == set(CORPUS)
    assert len(held) == round(len(set(CORPUS)) * 0.1)
    assert (train, held) == split_held_out(CORPUS, fraction=0.1, seed=0)
    assert held != split_held_out(CORPUS, fraction=0.1, seed=1)[1]


def test_held_out_split_works_on_pairs() -> None:
    pairs = passive_pairs(300, seed=0) * 2
    train, held = split_held_out(pairs, fraction=0.2)
    assert set(train).isdisjoint(held) and len(train) + len(held) == len(set(pairs))


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_bad_fraction_is_a_config_error(fraction: float) -> None:
    with pytest.raises(ConfigError, match="fraction"):
        split_held_out(CORPUS, fraction=fraction)


def test_too_few_items_to_split_is_an_input_error() -> None:
    with pytest.raises(InputError, match="too few"):
        split_held_out(["The cat sat.", "The cat sat."], fraction=0.5)


# ---------------------------------------------------------------------------------------------------------
# The user's files.
# ---------------------------------------------------------------------------------------------------------


def write(tmp_path: Path, data: bytes, name: str = "corpus.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_read_corpus_file(tmp_path: Path) -> None:
    text = "\ufeffThe cat sat.  \r\n\r\n  Indented line\n\n吾輩は猫である。\n   \nlast line without newline"
    path = write(tmp_path, text.encode("utf-8"))
    assert read_corpus_file(path) == [
        "The cat sat.",
        "  Indented line",
        "吾輩は猫である。",
        "last line without newline",
    ]
    assert read_corpus_file(str(path)) == read_corpus_file(path)


def test_read_pairs_file(tmp_path: Path) -> None:
    path = write(tmp_path, b"The cat chased the dog.\tThe dog was chased by the cat.\r\n\n a \t b \n")
    assert read_pairs_file(path) == [
        ("The cat chased the dog.", "The dog was chased by the cat."),
        ("a", "b"),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"a\tb\n\nno tab here\n", "line 3 has 0 tabs.*exactly one tab"),
        (b"a\tb\tc\n", "line 1 has 2 tabs"),
        (b"a\tb\n \tb\n", "line 2 has an empty source"),
        (b"a\t\n", "line 1 has an empty target"),
    ],
)
def test_bad_pairs_line_names_the_line(tmp_path: Path, data: bytes, message: str) -> None:
    path = write(tmp_path, data, "pairs.tsv")
    with pytest.raises(InputError, match=message) as caught:
        read_pairs_file(path)
    assert str(path) in str(caught.value)


BAD_FILES = [
    ("missing", None, "does not exist; check the path"),
    ("folder", None, "is a folder, not a file"),
    ("empty", b"", "is empty or holds only blank lines"),
    ("blank lines", b"\n  \r\n\t\n", "is empty or holds only blank lines"),
    ("latin-1", "line one\ncafé\n".encode("latin-1"), r"not UTF-8: byte 0xe9 at byte offset 12 \(line 2\)"),
    ("binary", b"GIF89a\x01\x00\x00\xff", "looks binary \\(a NUL byte at byte offset 7\\)"),
    ("utf-16", "hello\n".encode("utf-16"), "looks binary.*UTF-16"),
]


@pytest.mark.parametrize(("case", "data", "message"), BAD_FILES, ids=[case for case, _, _ in BAD_FILES])
@pytest.mark.parametrize("reader", [read_corpus_file, read_pairs_file])
def test_bad_file_is_an_input_error_naming_path_problem_and_fix(
    tmp_path: Path, reader: object, case: str, data: bytes | None, message: str
) -> None:
    path = tmp_path / "data.txt"
    if case == "folder":
        path.mkdir()
    elif data is not None:
        path.write_bytes(data)
    with pytest.raises(InputError, match=message) as caught:
        reader(path)  # type: ignore[operator]
    assert str(path) in str(caught.value)
    assert not isinstance(caught.value, OSError | UnicodeError)


def test_non_utf8_offset_counts_the_byte_order_mark(tmp_path: Path) -> None:
    path = write(tmp_path, b"\xef\xbb\xbfab\xffc")
    with pytest.raises(InputError, match="byte offset 5 "):
        read_corpus_file(path)
