"""The rows of a damaged SQLite file read page by page, the way SQLite's own recovery does
(sqlite.org/recovery.html): every table b-tree leaf page is decoded on its own, so a row is found
whatever happened to the pages above it (an interior page, the schema, the file's end cut off).

Only the file format is read (sqlite.org/fileformat.html, sections 1.3, 1.6, 2.1 and 2.4; the
section numbers are cited below): the header's page size and freelist, leaf cells, their
overflow chains and the record format. Nothing is trusted: a page that is not a table leaf is
skipped, a cell whose sizes, offsets or overflow chain do not fit the file is counted as lost,
and the freelist's pages (old contents SQLite no longer uses) are left out. A WAL file beside the
store is not read here: SQLite reads it on the way through the b-tree (store/repair.py does that
first), and a store gpuscout closed has none.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from gpuscout.core.outputs import SQLITE_HEADER

# sqlite.org/fileformat.html 1.3: the header's fields this reader uses
HEADER_BYTES = 100
PAGE_SIZES = tuple(2**n for n in range(9, 17))  # 512 ... 65536
TABLE_LEAF = 0x0D  # 1.6: a table b-tree leaf page
LEAF_HEADER_BYTES = 8


@dataclass
class Scan:
    """What a page-by-page read of a file found."""

    page_size: int
    pages: int  # whole pages in the file
    rows: list[tuple[int, int, list]] = field(default_factory=list)  # (page, rowid, values)
    lost_cells: int = 0  # cells on leaf pages whose bytes do not decode
    leaf_pages: int = 0


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """(value, the offset after it): 2.1's variable-length integer, 1 to 9 bytes, big-endian."""
    value = 0
    for i in range(8):
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | data[at + 8], at + 9


def _values(payload: bytes) -> list:
    """2.1's record format: a header of serial types, then the values. ValueError when the bytes
    do not make a record."""
    header_size, at = _varint(payload, 0)
    if not 0 < header_size <= len(payload):
        raise ValueError("record header out of the payload")
    kinds = []
    while at < header_size:
        kind, at = _varint(payload, at)
        kinds.append(kind)
    body, values = header_size, []
    for kind in kinds:
        if kind == 0:
            values.append(None)
        elif 1 <= kind <= 6:
            width = (1, 2, 3, 4, 6, 8)[kind - 1]
            values.append(int.from_bytes(payload[body : body + width], "big", signed=True))
            body += width
        elif kind == 7:
            values.append(struct.unpack(">d", payload[body : body + 8])[0])
            body += 8
        elif kind in (8, 9):
            values.append(kind - 8)
        elif kind >= 12:
            width = (kind - 12) // 2
            chunk = payload[body : body + width]
            values.append(chunk.decode("utf-8", errors="replace") if kind % 2 else bytes(chunk))
            body += width
        else:
            raise ValueError(f"serial type {kind} is reserved")
        if body > len(payload):
            raise ValueError("a value runs past the payload")
    return values


class _File:
    def __init__(self, data: bytes, page_size: int, header: bool = True) -> None:
        self.data, self.page_size, self.header = data, page_size, header
        reserved = data[20] if header and len(data) > 20 else 0
        self.usable = page_size - reserved
        self.pages = len(data) // page_size

    def page(self, number: int) -> bytes:
        if not 1 <= number <= self.pages:
            raise ValueError(f"page {number} is not in the file")
        start = (number - 1) * self.page_size
        return self.data[start : start + self.page_size]

    def freelist(self) -> set[int]:
        """The freelist's trunk and leaf pages (1.5), as far as they can be followed."""
        pages: set[int] = set()
        trunk = int.from_bytes(self.data[32:36], "big") if self.header and len(self.data) >= 36 else 0
        while trunk and trunk not in pages and 1 <= trunk <= self.pages:
            pages.add(trunk)
            page = self.page(trunk)
            count = int.from_bytes(page[4:8], "big")
            leaves = [
                int.from_bytes(page[8 + 4 * i : 12 + 4 * i], "big") for i in range(min(count, self.usable // 4 - 2))
            ]
            pages.update(p for p in leaves if 1 <= p <= self.pages)
            trunk = int.from_bytes(page[0:4], "big")
        return pages

    def payload(self, page: bytes, at: int) -> tuple[int, bytes]:
        """(rowid, the whole payload) of the table leaf cell at `at` (1.6), its overflow chain
        followed; ValueError when it does not fit the file."""
        size, at = _varint(page, at)
        rowid, at = _varint(page, at)
        if rowid >= 2**63:
            rowid -= 2**64
        if size > len(self.data):
            raise ValueError("a payload larger than the file")
        most = self.usable - 35
        if size <= most:
            local = size
        else:
            least = (self.usable - 12) * 32 // 255 - 23
            local = least + (size - least) % (self.usable - 4)
            if local > most:
                local = least
        if at + local > len(page):
            raise ValueError("a cell runs past its page")
        parts, got = [page[at : at + local]], local
        if local < size:
            following = int.from_bytes(page[at + local : at + local + 4], "big")
            seen: set[int] = set()
            while got < size:
                if following in seen:
                    raise ValueError("an overflow chain that loops")
                seen.add(following)
                overflow = self.page(following)
                chunk = overflow[4 : 4 + min(self.usable - 4, size - got)]
                parts.append(chunk)
                got += len(chunk)
                following = int.from_bytes(overflow[0:4], "big")
        return rowid, b"".join(parts)


def header_intact(data: bytes) -> bool:
    """Whether the file starts with SQLite's header (1.3.1) and a page size it allows (1.3.2)."""
    return len(data) >= HEADER_BYTES and bytes(data[:16]) == SQLITE_HEADER and _header_page_size(data) is not None


def _header_page_size(data: bytes) -> int | None:
    raw = int.from_bytes(data[16:18], "big")
    size = 65536 if raw == 1 else raw
    return size if size in PAGE_SIZES else None


def scan(data: bytes) -> Scan:
    """Every row on every table leaf page of an SQLite file's bytes. The header is not trusted:
    where it is damaged (its first page zeroed), every page size SQLite allows is tried and the
    one whose pages decode the most rows is taken (a page size that is wrong cuts every page at
    the wrong place, and its cells do not decode); its reserved bytes are taken as none and its
    freelist as empty."""
    if header_intact(data):
        return _scan(_File(data, _header_page_size(data)))
    tries = [_scan(_File(data, size, header=False)) for size in sorted(PAGE_SIZES, key=lambda n: n != 4096)]
    return max(tries, key=lambda t: len(t.rows))  # a tie keeps 4096, SQLite's default


def _scan(file: _File) -> Scan:
    page_size = file.page_size
    out = Scan(page_size, file.pages)
    try:
        skip = file.freelist()
    except (ValueError, IndexError):
        skip = set()
    for number in range(1, file.pages + 1):
        if number in skip:
            continue
        page = file.page(number)
        start = HEADER_BYTES if number == 1 and file.header else 0
        if page[start] != TABLE_LEAF:
            continue
        out.leaf_pages += 1
        cells = int.from_bytes(page[start + 3 : start + 5], "big")
        pointers = start + LEAF_HEADER_BYTES
        for i in range(min(cells, (page_size - pointers) // 2)):
            offset = int.from_bytes(page[pointers + 2 * i : pointers + 2 * i + 2], "big")
            try:
                if not pointers + 2 * cells <= offset < page_size:
                    raise ValueError("a cell pointer outside the page's content")
                rowid, payload = file.payload(page, offset)
                out.rows.append((number, rowid, _values(payload)))
            except (ValueError, IndexError, struct.error):
                out.lost_cells += 1
    return out
