"""Text the user gives: a corpus (one document or sentence per line) or pairs (source<TAB>target per line).

Every problem with the file becomes an `InputError` that names the path, what is wrong and how to fix it,
never a raw FileNotFoundError or UnicodeDecodeError from deep inside a training run.
"""

import os
from pathlib import Path

from onnxformer.runtime.errors import InputError

# A UTF-8 file saved by Windows tools may begin with a byte order mark; it is not part of the text.
BOM = b"\xef\xbb\xbf"


def read_text_file(path: str | os.PathLike[str]) -> str:
    """The whole file as text, checked to be a readable, non-empty UTF-8 text file."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a folder, not a file; give the path of a UTF-8 text file inside it")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(
            f"{path} does not exist; check the path (a relative path starts at {Path.cwd()})"
        ) from None
    except OSError as error:
        raise InputError(f"{path} cannot be read ({error.strerror}); check its permissions") from None
    bom = len(BOM) if data.startswith(BOM) else 0
    data = data[bom:]
    if not data.strip():
        raise InputError(f"{path} is empty or holds only blank lines; give a file with text in it")
    nul = data.find(b"\0")
    if nul >= 0:
        # A text file never holds NUL; UTF-16 text holds one in every ASCII character.
        raise InputError(
            f"{path} looks binary (a NUL byte at byte offset {nul}); give a UTF-8 text file "
            "(if it is UTF-16 text, re-save it as UTF-8)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        offset = bom + error.start
        line = data.count(b"\n", 0, error.start) + 1
        raise InputError(
            f"{path} is not UTF-8: byte 0x{data[error.start]:02x} at byte offset {offset} (line {line}) "
            "cannot be decoded; re-save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        ) from None


def read_corpus_file(path: str | os.PathLike[str]) -> list[str]:
    """One text per non-blank line, trailing whitespace (and the newline, \\n or \\r\\n) removed."""
    lines = [line.rstrip() for line in read_text_file(path).split("\n")]
    return [line for line in lines if line]


def read_pairs_file(path: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """(source, target) per non-blank line `source<TAB>target`; spaces around either side are dropped."""
    pairs = []
    for number, line in enumerate(read_text_file(path).split("\n"), start=1):
        if not line.strip():
            continue
        fields = line.rstrip("\r").split("\t")
        if len(fields) != 2:
            raise InputError(
                f"{path} line {number} has {len(fields) - 1} tabs; each line must be source<TAB>target with "
                "exactly one tab (a tab inside the text must be replaced by a space)"
            )
        source, target = (field.strip() for field in fields)
        if not source or not target:
            side = "source" if not source else "target"
            raise InputError(f"{path} line {number} has an empty {side}; write text on both sides of the tab")
        pairs.append((source, target))
    return pairs
