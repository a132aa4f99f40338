"""What a file is, from its first bytes: text or binary, a type guess from magic numbers, and image
dimensions read from the header (no image library needed)."""

from __future__ import annotations

import codecs
import struct
from dataclasses import dataclass

SNIFF_BYTES = 8192  # bytes looked at to tell text from binary
BINARY_INVALID_RATIO = 0.10  # share of bytes that are not UTF-8 above which a NUL-free file counts as binary

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")  # images read attaches

# (offset, magic bytes, media type, description); first match wins.
_MAGIC: tuple[tuple[int, bytes, str, str], ...] = (
    (0, b"\x89PNG\r\n\x1a\n", "image/png", "PNG image"),
    (0, b"\xff\xd8\xff", "image/jpeg", "JPEG image"),
    (0, b"GIF87a", "image/gif", "GIF image"),
    (0, b"GIF89a", "image/gif", "GIF image"),
    (0, b"%PDF-", "application/pdf", "PDF document"),
    (0, b"\x7fELF", "application/x-executable", "ELF executable or shared library"),
    (0, b"MZ", "application/vnd.microsoft.portable-executable", "Windows executable (PE/MZ)"),
    (0, b"\xcf\xfa\xed\xfe", "application/x-mach-binary", "Mach-O binary"),
    (0, b"\xca\xfe\xba\xbe", "application/java-vm", "Java class file or Mach-O universal binary"),
    (0, b"PK\x03\x04", "application/zip", "ZIP archive (also jar, docx, xlsx, wheel)"),
    (0, b"PK\x05\x06", "application/zip", "empty ZIP archive"),
    (0, b"\x1f\x8b", "application/gzip", "gzip compressed data"),
    (0, b"BZh", "application/x-bzip2", "bzip2 compressed data"),
    (0, b"\xfd7zXZ\x00", "application/x-xz", "xz compressed data"),
    (0, b"\x28\xb5\x2f\xfd", "application/zstd", "zstd compressed data"),
    (0, b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed", "7-Zip archive"),
    (0, b"Rar!\x1a\x07", "application/vnd.rar", "RAR archive"),
    (257, b"ustar", "application/x-tar", "tar archive"),
    (0, b"SQLite format 3\x00", "application/vnd.sqlite3", "SQLite database"),
    (0, b"\x00asm", "application/wasm", "WebAssembly module"),
    (0, b"ID3", "audio/mpeg", "MP3 audio"),
    (0, b"OggS", "audio/ogg", "Ogg media"),
    (0, b"fLaC", "audio/flac", "FLAC audio"),
    (0, b"\x1aE\xdf\xa3", "video/webm", "Matroska/WebM video"),
    (0, b"PAR1", "application/vnd.apache.parquet", "Parquet file"),
    (0, b"ARROW1", "application/vnd.apache.arrow.file", "Arrow IPC file"),
    (0, b"\x93NUMPY", "application/x-npy", "NumPy array (.npy)"),
    (0, b"\x80\x04\x95", "application/x-python-pickle", "Python pickle"),
    (0, b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "application/x-ole-storage", "MS Office (OLE) document"),
)


@dataclass(frozen=True, slots=True)
class Sniff:
    binary: bool
    media_type: str | None  # from magic bytes, when recognised
    description: str  # "PNG image", "UTF-8 text", "binary data (NUL bytes)", ...
    invalid_utf8_bytes: int = 0  # in the sniffed bytes


def guess_type(head: bytes) -> tuple[str, str] | None:
    """(media type, description) from magic bytes, or None."""
    for offset, magic, media_type, description in _MAGIC:
        if head[offset : offset + len(magic)] == magic:
            return media_type, description
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp", "WebP image"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav", "WAV audio"
    if head[4:8] == b"ftyp":
        return "video/mp4", "MP4/QuickTime media"
    return None


def invalid_utf8_count(data: bytes, at_eof: bool) -> int:
    """Bytes of `data` that are not valid UTF-8 (a sequence cut by the end of `data` is not counted
    unless `at_eof`)."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    text = decoder.decode(data, final=at_eof)
    return sum(1 for ch in text if "\udc80" <= ch <= "\udcff") if not text.isascii() else 0


def sniff(head: bytes, at_eof: bool) -> Sniff:
    """Text or binary from the first bytes of a file (`at_eof`: `head` is the whole file)."""
    guess = guess_type(head)
    if b"\x00" in head:
        media_type, description = guess or (None, "binary data (contains NUL bytes)")
        return Sniff(True, media_type, description)
    invalid = invalid_utf8_count(head, at_eof)
    # Magic numbers of binary formats without a NUL in the first bytes (small images, gzip) still win;
    # a text file that merely starts like one ("MZ", "BZh") stays text.
    if guess is not None and (invalid or guess[0] in IMAGE_TYPES or guess[0] == "application/pdf"):
        return Sniff(True, guess[0], guess[1], invalid)
    if head and invalid / len(head) > BINARY_INVALID_RATIO:
        return Sniff(True, None, f"binary data ({invalid} of the first {len(head)} bytes are not UTF-8)", invalid)
    return Sniff(False, None, "UTF-8 text" if not invalid else "text with invalid UTF-8", invalid)


@dataclass(frozen=True, slots=True)
class ImageInfo:
    media_type: str
    width: int | None
    height: int | None


def image_info(data: bytes) -> ImageInfo | None:
    """Media type and pixel size of a PNG, JPEG, GIF or WebP from its header, or None."""
    guess = guess_type(data)
    if guess is None or guess[0] not in IMAGE_TYPES:
        return None
    media_type = guess[0]
    size: tuple[int, int] | None = None
    try:
        if media_type == "image/png" and data[12:16] == b"IHDR":
            size = struct.unpack(">II", data[16:24])
        elif media_type == "image/gif":
            size = struct.unpack("<HH", data[6:10])
        elif media_type == "image/webp":
            size = _webp_size(data)
        elif media_type == "image/jpeg":
            size = _jpeg_size(data)
    except struct.error:
        size = None
    return ImageInfo(media_type, *(size or (None, None)))


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame markers carry the size


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        length = struct.unpack(">H", data[pos + 2 : pos + 4])[0]
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return width, height
        pos += 2 + length
    return None
