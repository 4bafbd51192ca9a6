"""Dense search: one float32 matrix of every stored vector, reloaded only when the index changed."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from puremind.store import Store


class DenseIndex:
    """The stored vectors as one in-memory matrix, keyed by the store's change counter.

    The indexer bumps the counter with every committed change, so `refresh` reloads only after an index run
    wrote something (not per connection, and not on compaction). Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter: int | None = None
        self._ids = np.empty(0, dtype=np.int64)
        self._matrix = np.empty((0, 0), dtype=np.float32)
        self.loads = 0  # how many times the matrix was (re)loaded; tests and benchmarks read it

    def refresh(self, store: "Store") -> None:
        """Reload the matrix when the store changed since the last load. Call inside the search's snapshot.

        Raises:
            StoreError: the index cannot be read.
        """
        counter = store.change_counter()
        with self._lock:
            if counter == self._counter:
                return
            ids, matrix16 = store.vectors()
            # float32 once at load: BLAS has no float16 matrix-vector product, and converting per query would
            # cost more than the product itself.
            self._ids, self._matrix = ids, matrix16.astype(np.float32)
            self._counter = counter
            self.loads += 1

    @property
    def size(self) -> int:
        return int(self._ids.shape[0])

    def search(self, query: np.ndarray, top: int) -> list[tuple[int, float]]:
        """The `top` chunk ids by cosine similarity to `query` (vectors are L2-normalised), best first."""
        with self._lock:
            ids, matrix = self._ids, self._matrix
        if ids.shape[0] == 0 or top <= 0:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if q.shape[0] != matrix.shape[1]:
            from puremind.errors import FingerprintMismatch

            raise FingerprintMismatch(
                f"the index holds {matrix.shape[1]}-dimensional vectors but the embedder makes {q.shape[0]}",
                hint="run `puremind index --rebuild`",
            )
        scores = matrix @ q
        top = min(top, scores.shape[0])
        part = np.argpartition(-scores, top - 1)[:top]
        order = part[np.lexsort((ids[part], -scores[part]))]
        return [(int(ids[i]), float(scores[i])) for i in order]
