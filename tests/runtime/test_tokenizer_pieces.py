"""How a sentence reads token by token (the attention highlighter's sentence) for tokenizers that are not
byte-level: WordPiece pieces carry the space their decoding puts before them, and none inside a word."""

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

from onnxformer.runtime.tokenizer import TextTokenizer


def test_wordpiece_pieces_read_as_the_decoded_text() -> None:
    vocab = {
        t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "purr", "##ed", "."])
    }
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    special = {"pad": 0, "unk": 1, "cls": 2, "sep": 3}
    tokenizer = TextTokenizer.from_bytes(tok.to_str().encode(), special, name="tokenizer.json")
    ids = [2, *tokenizer.encode("The cat purred."), 3]
    pieces = tokenizer.pieces(ids)
    assert pieces == ["[CLS]", "the", " cat", " purr", "ed", ".", "[SEP]"]
    assert "".join(pieces[1:-1]) == tokenizer.decode(ids[1:-1])
