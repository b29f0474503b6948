"""Tokenizers of every kind the hosts read, and varied text to compare them on (tests/test_c_tokenizer.py).

The tokenizer.json files are built here with the `tokenizers` trainers (and sentencepiece, for the
Precompiled normalizer SentencePiece models carry) on a corpus of many scripts, in the shapes real
checkpoints have: BERT's WordPiece, GPT-2's, Llama 3's and Qwen 2's byte-level BPE, Llama 2's and Gemma's
SentencePiece BPE with byte fallback, T5's and XLM-R's Unigram. The real all-MiniLM-L6-v2 tokenizer and
the reference exports' and the imported models' tokenizers are added by the test.

`varied_texts` draws the strings: words of many scripts, emoji sequences, combining marks, runs of every
kind of whitespace, control characters and NUL, fullwidth and compatibility forms, case pairs with
special mappings, the tokenizers' own special tokens inside text, very long words, and the empty string.
"""

import json
import random
import unicodedata
from pathlib import Path

from hf_models import with_byte_fallback
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"""
    r"""\s+(?!\S)|\s+"""
)

# Letters of many scripts (Unicode block ranges), from which the corpus and the texts draw words.
SCRIPTS = {
    "latin": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "latin-accents": "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßœłńśźżčšžřůőűİıĞğŞş",
    "greek": "αβγδεζηθικλμνξοπρστυφχψωςΑΒΓΔΣΩάέήίόύώ",
    "cyrillic": "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЭЮЯёЁ",
    "arabic": "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
    "hebrew": "אבגדהוזחטיכלמנסעפצקרשת",
    "devanagari": "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह्ािीुूेैोौं",
    "thai": "กขคงจฉชซญดตถทธนบปผพฟภมยรลวศษสหอฮะาิีึืุูเแโใไ่้๊๋",
    "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下"
    "以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作"
    "当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长",
    "hiragana": "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほ"
    "まみむめもやゆよらりるれろわをん",
    "katakana": "アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホ"
    "マミムメモヤユヨラリルレロワヲンー",
    "hangul": "가나다라마바사아자차카타파하한국어글말소리",
    "digits": "0123456789٠١٢٣٤٥٦٧٨٩०१२३४५६७८९",
}
PUNCTUATION = list(".,;:!?'\"()[]{}<>-_/\\@#$%^&*+=|~`") + list("«»„“”‘’…—–·¿¡、。「」『』！？（）【】")
EMOJI = [
    "😀", "🎉", "👍", "👍🏽", "❤️", "🇫🇷", "🇯🇵", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🤖", "🦀", "1️⃣", "✨", "🧑🏿‍🚀",
]  # fmt: skip
WHITESPACE = [
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\u00a0",
    "\u3000",
    "\u2009",
    "\u200b",
    "\u2028",
    "\x0b",
    "\x0c",
]
CONTROL = ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\u0085", "\u200d", "\u200e", "\ufeff", "\ufffd"]
COMBINING = ["\u0301", "\u0300", "\u0308", "\u0327", "\u0303", "\u20dd", "\u0489", "\u0651", "\u093c"]
# Forms that normalizers change: compatibility (NFKC), case with special mappings, ligatures, composed and
# decomposed accents.
FORMS = [
    "ｆｕｌｌｗｉｄｔｈ", "ＡＢＣ１２３", "ﬁ", "ﬂour", "Ⅻ", "x²", "H₂O", "½", "㎏", "℃", "ǅ", "İstanbul",
    "ß", "ẞ",
    "ΣΊΣΥΦΟΣ", "e\u0301", "é", "Å", "Å", "ㄱ", "\u1100\u1161", "가", "ﾊﾟ", "①", "™", "…", "ª", "Ǆ",
]  # fmt: skip


def _word(rng: random.Random, script: str, low: int = 1, high: int = 9) -> str:
    letters = SCRIPTS[script]
    return "".join(rng.choice(letters) for _ in range(rng.randint(low, high)))


def lexicon(seed: int = 0, size: int = 40) -> dict[str, list[str]]:
    """Per script, the words the corpus repeats, so that the trainers learn multi-character tokens."""
    rng = random.Random(seed)
    return {script: [_word(rng, script, 2, 8) for _ in range(size)] for script in SCRIPTS}


def corpus(seed: int = 0, lines: int = 1500) -> list[str]:
    """Training text: sentences of one script's words (sometimes another's), punctuation and emoji."""
    rng = random.Random(seed)
    words_of = lexicon(seed)
    scripts = list(SCRIPTS)
    text = []
    for _ in range(lines):
        script = rng.choice(scripts)
        words = [rng.choice(words_of[script if rng.random() < 0.8 else rng.choice(scripts)])
                 for _ in range(rng.randint(3, 12))]  # fmt: skip
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words) + 1), rng.choice(EMOJI))
        if rng.random() < 0.5:
            words.append(rng.choice(PUNCTUATION))
        text.append(" ".join(words))
    return text


def _assigned(rng: random.Random) -> str:
    """A random assigned character of any plane (no surrogate, no private use, no unassigned)."""
    while True:
        code = rng.choice(
            (rng.randrange(0x20, 0x3000), rng.randrange(0x3000, 0x10000), rng.randrange(0x10000, 0x31350))
        )
        if 0xD800 <= code <= 0xDFFF:
            continue
        if unicodedata.category(chr(code)) not in ("Cn", "Co", "Cs"):
            return chr(code)


def varied_texts(count: int, *, seed: int, specials: list[str] = ()) -> list[str]:
    """`count` strings of many kinds (see the module's docstring); the first few are fixed edge cases."""
    rng = random.Random(seed)
    fixed = ["", " ", "  ", "\n", "\t\t", "a", "A", "\x00", "hello world", " leading", "trailing ",
             "a  b   c",
             "don't I'll we've", "ＡＢＣ", "🇫🇷👩‍💻", "e\u0301\u0301\u0301", "\r\n\r\n", "x" * 5000,
             "ab" * 3000, "1234567890" * 40, "é" * 1000, "的" * 700]  # fmt: skip
    fixed += [f"{s}" for s in specials] + [f"a {s} b" for s in specials] + [f"{s}{s}x{s}" for s in specials]
    texts = fixed[:count]
    scripts = list(SCRIPTS)
    words_of = lexicon()
    while len(texts) < count:
        parts = []
        for _ in range(rng.randint(0, 12)):
            kind = rng.random()
            if kind < 0.3:
                parts.append(rng.choice(words_of[rng.choice(scripts)]))
            elif kind < 0.45:
                parts.append(_word(rng, rng.choice(scripts)))
            elif kind < 0.55:
                parts.append(rng.choice(PUNCTUATION) * rng.randint(1, 3))
            elif kind < 0.62:
                parts.append(rng.choice(EMOJI))
            elif kind < 0.70:
                parts.append(rng.choice(FORMS))
            elif kind < 0.76:
                parts.append(
                    _word(rng, "latin", 1, 4)
                    + "".join(rng.choice(COMBINING) for _ in range(rng.randint(1, 3)))
                )
            elif kind < 0.84:
                parts.append("".join(_assigned(rng) for _ in range(rng.randint(1, 4))))
            elif kind < 0.88:
                parts.append(rng.choice(CONTROL))
            elif kind < 0.92 and specials:
                parts.append(rng.choice(specials))
            elif kind < 0.93:
                parts.append(_word(rng, rng.choice(scripts), 100, 600))
            else:
                parts.append(rng.choice(WHITESPACE) * rng.randint(1, 4))
        glue = [rng.choice([" ", " ", " ", "", rng.choice(WHITESPACE)]) for _ in parts]
        texts.append("".join(g + p for g, p in zip(glue, parts, strict=True)))
    return texts


def _bpe_trained(
    tok: Tokenizer, specials: list[str], *, vocab: int = 1200, alphabet: list[str] | None = None
) -> Tokenizer:
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=specials, initial_alphabet=alphabet or [], show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    return tok


def _split_byte_level(pattern: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def _byte_level(pre: pre_tokenizers.PreTokenizer, specials: list[str], normalizer=None) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    return _bpe_trained(tok, specials, alphabet=pre_tokenizers.ByteLevel.alphabet())


def _byte_fallback(
    specials: list[str], normalizer: normalizers.Normalizer, decoder: decoders.Decoder
) -> Tokenizer:
    """SentencePiece-style BPE: no pre-tokenizer, "▁" for spaces, <0xXX> byte tokens for what is not in the
    vocabulary (Llama 2, Gemma)."""
    trained = Tokenizer(models.BPE(unk_token="<unk>"))
    trained.normalizer = normalizers.Replace(" ", "\u2581")
    _bpe_trained(trained, specials, vocab=900)
    tok = with_byte_fallback(trained, specials)
    tok.normalizer = normalizer
    tok.decoder = decoder
    return tok


def _unigram(
    specials: list[str], normalizer: normalizers.Normalizer | None, *, byte_fallback: bool = False
) -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=800, special_tokens=specials, unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    if not byte_fallback:
        return tok
    # As SentencePiece's byte_fallback models have them: the 256 byte pieces, scored 0.
    data = json.loads(tok.to_str())
    data["model"]["vocab"] += [[f"<0x{b:02X}>", 0.0] for b in range(256)]
    data["model"]["byte_fallback"] = True
    tok = Tokenizer.from_str(json.dumps(data))
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    return tok


def _sentencepiece_unigram(folder: Path) -> Tokenizer:
    """A SentencePiece Unigram model trained with its nmt_nfkc rule and converted as transformers converts
    T5's and XLM-R's: the normalizer is the model's own Precompiled charsmap."""
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2

    model = folder / "spm.model"
    with model.open("wb") as handle:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(corpus()), model_writer=handle, vocab_size=900, model_type="unigram",
            normalization_rule_name="nmt_nfkc", character_coverage=1.0, minloglevel=2,
        )  # fmt: skip
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.read_bytes())
    vocab = [(piece.piece, piece.score) for piece in proto.pieces]
    tok = Tokenizer(models.Unigram(vocab, unk_id=proto.trainer_spec.unk_id, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([
        normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap),
        normalizers.Replace(Regex(" {2,}"), " "),
    ])  # fmt: skip
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.add_special_tokens([piece.piece for piece in proto.pieces if piece.type in (2, 3)])
    return tok


def build_tokenizers(folder: Path) -> dict[str, tuple[str, Path]]:
    """name -> (kind, tokenizer.json path) for the kinds the C host reads; written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    gpt2_specials = ["<|endoftext|>"]
    llama3_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    qwen_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    sp_specials = ["<unk>", "<s>", "</s>"]
    gemma_specials = ["<pad>", "<eos>", "<bos>", "<unk>"]

    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wordpiece.decoder = decoders.WordPiece()
    wordpiece.train_from_iterator(
        corpus(), trainer=trainers.WordPieceTrainer(
            vocab_size=1500, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
            show_progress=False,
        )
    )  # fmt: skip

    roberta = _byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False), ["<s>", "<pad>", "</s>", "<unk>"])
    roberta.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True)])
    llama2 = _byte_fallback(
        sp_specials,
        normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]),
        decoders.Sequence([
            decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]),
    )  # fmt: skip
    gemma = _byte_fallback(
        gemma_specials,
        normalizers.Replace(" ", "\u2581"),
        decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]),
    )
    built = {
        "bert-wordpiece": ("wordpiece", wordpiece),
        "gpt2-byte-bpe": (
            "byte-level-bpe", _byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False), gpt2_specials)
        ),
        "roberta-byte-bpe": ("byte-level-bpe", roberta),
        "llama3-byte-bpe": (
            "byte-level-bpe", _byte_level(_split_byte_level(LLAMA3_PATTERN), llama3_specials)
        ),
        "qwen2-byte-bpe": (
            "byte-level-bpe", _byte_level(_split_byte_level(QWEN2_PATTERN), qwen_specials, normalizers.NFC())
        ),
        "llama2-sp-bpe": ("sentencepiece-bpe", llama2),
        "gemma-sp-bpe": ("sentencepiece-bpe", gemma),
        "t5-unigram": ("unigram", _unigram(["<pad>", "</s>", "<unk>"], normalizers.NFKC())),
        "unigram-byte-fallback": ("unigram", _unigram(["<pad>", "</s>", "<unk>"], None, byte_fallback=True)),
        "xlmr-unigram-precompiled": ("unigram", _sentencepiece_unigram(folder)),
    }  # fmt: skip
    paths = {}
    for name, (kind, tok) in built.items():
        path = folder / f"{name}.json"
        tok.save(str(path))
        paths[name] = (kind, path)
    return paths


if __name__ == "__main__":
    import sys

    for name, (kind, path) in build_tokenizers(Path(sys.argv[1])).items():
        print(kind, name, path)
