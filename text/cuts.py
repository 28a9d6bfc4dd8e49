"""Where a long text may be cut into pieces that encode to the same tokens as the whole.

GPT-2's pre-tokenization (tokenizer.GPT2_PATTERN, used by the gpt2 and the learned bpe tokenizers) splits the text
into pieces that no token crosses. Two kinds of places always start such a piece, whatever comes after:
- a line start between two printable ASCII characters other than space ("x\nX" at X): the newline is a whitespace
  run of one, a piece of its own whether X follows or the text ends there. A longer run is not: the whole splits
  "x\n\nX" into "x", "\n", "\n", "X", but a text that ends in "x\n\n" ends in one piece, "\n\n" (another token);
- a space after a printable ASCII character other than space: only whitespace runs hold a space that is not
  their first character, so the piece before ends there and the space starts the next.
A text with neither for a long stretch (one 200 MB word) is cut at a character boundary: the tokens there may
differ from the whole's, but memory stays bounded (and tiktoken's merge of one huge piece would not end).
These places depend on the text alone, not on a tokenizer: text_cut uses them to cut a text into its splits at
the same characters for every tokenizer (dataset.split_text).
"""

from collections.abc import Iterator
from typing import BinaryIO

from errors import UserError

MAX_PIECE_FACTOR = 4  # a piece with no safe cut is cut at MAX_PIECE_FACTOR * chunk_bytes ...
MIN_FORCED_CUT = 1 << 16  # ... or at this many bytes, if more: no word of real text is that long


def is_printable(byte: int) -> bool:
    return 0x21 <= byte <= 0x7E


def line_start_before_end(data: bytes, single_newline: bool = True) -> int:
    """The last offset that follows a newline and holds a printable ASCII character other than space, where (with
    single_newline) the newline follows one too; 0 if none."""
    cut = data.rfind(b"\n", 0, len(data) - 1)
    while cut >= 0 and not (is_printable(data[cut + 1]) and
                            (not single_newline or cut > 0 and is_printable(data[cut - 1]))):
        cut = data.rfind(b"\n", 0, cut)
    return cut + 1


def word_start_before_end(data: bytes) -> int:
    """The last offset of a space that follows a printable ASCII character other than space; 0 if none."""
    cut = data.rfind(b" ", 1)
    while cut > 0 and not is_printable(data[cut - 1]):
        cut = data.rfind(b" ", 1, cut)
    return max(cut, 0)


def char_start_before_end(data: bytes) -> int:
    """The last offset that starts a UTF-8 character (not a 0b10xxxxxx continuation byte); 0 if none."""
    cut = len(data) - 1
    while cut > 0 and data[cut] & 0xC0 == 0x80:
        cut -= 1
    return max(cut, 0)


def safe_cut(data: bytes, max_piece_bytes: int) -> int:
    """Where to cut data: the last line start, else the last word start, else (if data is longer than
    max_piece_bytes) the last character start; 0 means wait for more."""
    cut = line_start_before_end(data) or word_start_before_end(data)
    if not cut and len(data) >= max_piece_bytes:
        cut = char_start_before_end(data)
    return cut


def text_cut(text: str, offset: int) -> int:
    """The last place at or before character offset (below len(text)) that starts a line or a word, whichever is
    later, within MIN_FORCED_CUT characters; offset itself if there is none (a text of no ASCII words). Every
    tokenizer's splits cut here, at the same character. A line start after more than one newline counts too (the
    rule every prepared dataset was cut by): there the split before it ends in one piece of whitespace ("\n\n")
    where the whole text has two ("\n", "\n"), its only token that differs from the whole's."""
    start = max(offset - MIN_FORCED_CUT, 0)
    window = text[start:offset + 1].encode("utf-8")  # ends with text[offset]: a piece may start there
    cut = max(line_start_before_end(window, single_newline=False), word_start_before_end(window))
    # The cut is at an ASCII byte (a newline's next or a space), so the bytes before it decode whole.
    return start + len(window[:cut].decode("utf-8")) if cut else offset


def decode_utf8(data: bytes, source: str, offset: int) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"input file {source!r} is not UTF-8 text: byte {data[e.start]:#x} at offset "
                        f"{offset + e.start} cannot be decoded") from None


def stream_pieces(file: BinaryIO, chunk_bytes: int, source: str) -> Iterator[tuple[str, int]]:
    """A binary stream's text as (text, bytes) pieces of about chunk_bytes each (at most MAX_PIECE_FACTOR times
    that, or MIN_FORCED_CUT), cut only where tokens end anyway. The buffer is a bytearray emptied from the front:
    memory stays within a few pieces whatever the file holds."""
    offset, pending, longest = 0, bytearray(), max(MAX_PIECE_FACTOR * chunk_bytes, MIN_FORCED_CUT)
    while block := file.read(chunk_bytes):
        pending += block
        cut = safe_cut(pending, longest)
        if cut:
            yield decode_utf8(bytes(pending[:cut]), source, offset), cut
            offset += cut
            del pending[:cut]
    if pending:
        yield decode_utf8(bytes(pending), source, offset), len(pending)
