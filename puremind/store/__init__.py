"""The SQLite index: note files, chunks, FTS5 keyword index and float16 vectors."""

from puremind.store.rows import ChunkRow, FileState, Hit, TitleHit, title_key
from puremind.store.store import Store, keyword_words

__all__ = ["Store", "ChunkRow", "FileState", "Hit", "TitleHit", "title_key", "keyword_words"]
