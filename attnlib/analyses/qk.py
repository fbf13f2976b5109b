"""The `qk` analysis: every query and key of a head over a corpus in one 2-D picture (AttentionViz, Yeh et al. 2023;
METHODS §17). The keys are translated and both sets scaled so that no attention weight changes, the 2N points are
projected (PCA, t-SNE or UMAP), and the picture's fidelity says how often a query's top key is its nearest key."""

from __future__ import annotations

import base64
import contextlib
import functools
import importlib
import itertools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

import numpy as np

from attnlib.analyses.base import Analysis, OptionError, Options, option
from attnlib.core.corpus import CorpusInput, Sentence
from attnlib.core.families import UnsupportedModelError, unsupported_reason
from attnlib.core.hooks import Capture
from attnlib.core.model import LoadedModel
from attnlib.core.runner import RunResult
from attnlib.results.files import ResultFileError, malformed
from attnlib.stats.special import CLASS_KEYS, class_masks, punct_mask

if TYPE_CHECKING:
    import pandas as pd

Method = Literal["pca", "tsne", "umap"]
METHODS: tuple[str, ...] = get_args(Method)
METHOD_NAMES = {"pca": "PCA", "tsne": "t-SNE", "umap": "UMAP"}
PERPLEXITY = 30.0  # t-SNE (METHODS §17)
NEIGHBOURS = 15  # UMAP
SEED = 0
KINDS = ("query", "key")
# pictures beside the asked one travel packed: each axis as codes over [lo, hi] (the grid's PCA exact to 1/65535 of
# its extent; t-SNE and UMAP, whose distances are only qualitative, to 1/255)
PACK_BITS = {"pca": 16, "tsne": 8, "umap": 8}
EXTRAS = {  # the optional libraries each projection needs: (module, pip name)
    "tsne": ("openTSNE", "openTSNE"),
    "umap": ("umap", "umap-learn"),
}


class ProjectionUnavailable(OptionError):
    """A projection whose library is not installed here; the message says what to install."""


# ---------------------------------------------------------------------------------------------- METHODS §17


def translated_keys(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """k'_j = k_j - mean(k) + mean(q) ([N, d] each): every score of row i moves by the same q_i . c."""
    return keys - keys.mean(0) + queries.mean(0)


def norm_balance(queries: np.ndarray, keys: np.ndarray) -> float:
    """s = sqrt(mean ||k|| / mean ||q||): q * s and k / s have the same mean norm and the same dot products."""
    q_norm, k_norm = np.linalg.norm(queries, axis=1).mean(), np.linalg.norm(keys, axis=1).mean()
    return float(np.sqrt(k_norm / q_norm)) if q_norm > 0 and k_norm > 0 else 1.0


def joint_points(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The 2N points [q * s; k' / s] of one head (float64 [2N, d]): queries first, keys translated, both scaled."""
    q, k = np.asarray(queries, np.float64), np.asarray(keys, np.float64)
    moved = translated_keys(q, k)
    s = norm_balance(q, moved)
    return np.concatenate([q * s, moved / s])


def pca_components(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the centred points [m, d], the first two right singular vectors [2, d]), each vector's largest-magnitude
    loading made positive; a component the data cannot give (m or d under 2) is zero."""
    centred = points - points.mean(0)
    # the right singular vectors of X are those of X^T X ([d, d]: 32 x 32 here, not [2N, d]). The product is an
    # einsum, not BLAS: a threaded BLAS waiting for a busy second core takes 100x longer (0.3 s against 2 ms)
    _, _, vt = np.linalg.svd(np.einsum("md,me->de", centred, centred, optimize=False))
    vt = vt[: min(len(centred), points.shape[1])]
    components = np.zeros((2, points.shape[1]))
    components[: min(2, len(vt))] = vt[:2]
    largest = components[np.arange(2), np.abs(components).argmax(1)]
    return centred, components * np.where(largest < 0, -1.0, 1.0)[:, None]


def pca_2d(points: np.ndarray) -> np.ndarray:
    """PCA of METHODS §17: the centred points on the first two right singular vectors (sign rule applied), [m, 2]."""
    centred, components = pca_components(points)
    return np.einsum("md,cd->mc", centred, components, optimize=False)


def optional_module(method: str) -> Any:
    """The library a projection needs, imported now; ProjectionUnavailable saying what to install when it is missing."""
    module, package = EXTRAS[method]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ProjectionUnavailable(
            f"{METHOD_NAMES[method]} needs {package}, which is not installed: pip install {package} "
            "(or pip install 'attnlib[projections]'); PCA needs nothing more."
        ) from exc


def tsne_perplexity(m: int) -> float:
    """METHODS §17's perplexity 30, lowered for a picture of fewer than 91 points (t-SNE needs 3 * perplexity < m)."""
    return min(PERPLEXITY, max((m - 1) / 3, 1.0))


def umap_neighbours(m: int) -> int:
    """METHODS §17's 15 neighbours, fewer for a picture of 16 points or less."""
    return max(2, min(NEIGHBOURS, m - 1))


def tsne_2d(points: np.ndarray, seed: int = SEED) -> np.ndarray:
    """t-SNE (openTSNE, Barnes-Hut): perplexity 30, exact neighbours, PCA initialisation, 100 + 300 iterations, seeded;
    [m, 2]."""
    open_tsne = optional_module("tsne")
    data = np.ascontiguousarray(points, np.float64)
    perplexity = tsne_perplexity(len(data))
    # exact neighbours (openTSNE's 3 * perplexity of them): 0.9 s on a head of 9,630 points against 6.5 s for its Annoy
    # index, and handed over as an index, since choosing one imports pynndescent (1.9 s); past 20,000 points the exact
    # search's m^2 outgrows the approximate one
    if len(data) <= 20_000:
        exact = open_tsne.nearest_neighbors.Sklearn(data, int(3 * perplexity), n_jobs=-1)
        affinities = open_tsne.affinity.PerplexityBasedNN(knn_index=exact, perplexity=perplexity, n_jobs=-1)
    else:
        affinities = open_tsne.affinity.PerplexityBasedNN(data, perplexity, n_jobs=-1, random_state=seed)
    embedding = open_tsne.TSNE(
        n_components=2,
        negative_gradient_method="bh",
        theta=0.8,
        # on that head openTSNE's 250 + 500 iterations took 26.1 s (final KL 1.631, fidelity: mean rank 11.22, top key
        # nearest 20.0%), 100 + 300 take 13.7 s (KL 1.679, mean rank 11.90, 23.2%); theta 0.5 took 34.2 s for KL 1.581,
        # FFT gradients (openTSNE's choice above 10,000 points) 59 s for 1.622
        early_exaggeration_iter=100,
        n_iter=300,
        random_state=seed,
        n_jobs=-1,
        verbose=False,
    ).fit(data, affinities=affinities)
    return np.asarray(embedding, np.float64)


def nearest_neighbours(points: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each point's k nearest points by Euclidean distance, exactly, itself first (as umap-learn takes them):
    indices [m, k] and distances [m, k] (float32)."""
    from sklearn.neighbors import NearestNeighbors  # umap-learn's own dependency

    distances, indices = NearestNeighbors(n_neighbors=k).fit(points).kneighbors(points)
    rows = np.arange(len(points))[:, None]
    is_self = indices == rows
    order = np.argsort(~is_self, axis=1, kind="stable")  # a duplicate point may come before the point itself
    indices, distances = np.take_along_axis(indices, order, 1), np.take_along_axis(distances, order, 1)
    missing = ~is_self.any(1)  # k duplicates: the point itself, at distance 0, goes in front of them
    indices[missing] = np.hstack([rows[missing], indices[missing, :-1]])
    distances[missing] = np.hstack([np.zeros((int(missing.sum()), 1)), distances[missing, :-1]])
    distances[:, 0] = 0.0
    return indices, distances.astype(np.float32)


@functools.cache
def _umap_compiled_once() -> None:
    """Cache on disk the numba functions of umap-learn that a fit compiles (umap-learn does not): without it every new
    process spent about 10 s compiling them before its first picture, with it only the first process on a machine."""
    from umap import layouts, umap_

    names = [(umap_, "smooth_knn_dist"), (umap_, "compute_membership_strengths")]
    names += [(layouts, "_nb_optimize_layout_euclidean_single_epoch" + p) for p in ("", "_parallel")]
    for module, name in names:  # umap-learn 0.5's names; another version's functions are left as they are
        with contextlib.suppress(Exception):  # an optimisation only: where it fails, they compile as before
            getattr(getattr(module, name, None), "enable_caching", lambda: None)()


def umap_2d(points: np.ndarray, seed: int = SEED) -> np.ndarray:
    """UMAP (umap-learn) on exact neighbours, 15 of them, seeded (which makes umap-learn run on one thread); [m, 2]."""
    umap = optional_module("umap")
    _umap_compiled_once()
    data = np.asarray(points, np.float32)
    k = umap_neighbours(len(data))
    # exact neighbours handed over: umap-learn's own search (pynndescent, from 4,096 points) compiles its numba code
    # in every new process too, which made the first UMAP of a head of 9,630 points take 69.5 s
    with warnings.catch_warnings():  # "n_jobs overridden to 1 by setting random_state": the price of a seed
        warnings.simplefilter("ignore")
        reducer = umap.UMAP(
            n_neighbors=k, n_components=2, random_state=seed, precomputed_knn=nearest_neighbours(data, k)
        )
        return np.asarray(reducer.fit_transform(data), np.float64)


def project(points: np.ndarray, method: str) -> np.ndarray:
    """The 2-D picture [m, 2] of points [m, d] by pca, tsne or umap."""
    if len(points) < 4 and method != "pca":
        return pca_2d(points)  # nothing to embed: neither t-SNE nor UMAP takes so few points
    return {"pca": pca_2d, "tsne": tsne_2d, "umap": umap_2d}[method](points)


@dataclass(frozen=True)
class Fidelity:
    """How faithful a picture is (METHODS §17): the mean 2-D distance rank of each query's top key among its input's
    keys (1 = nearest) and the share of queries whose top key is the nearest, against a key drawn uniformly from the
    same input (its expected rank and chance of being the nearest, computed exactly)."""

    mean_rank: float
    top_is_nearest: float
    random_mean_rank: float
    random_top_is_nearest: float

    def to_json(self) -> dict:
        return {
            "mean_rank": self.mean_rank,
            "top_is_nearest": self.top_is_nearest,
            "random": {"mean_rank": self.random_mean_rank, "top_is_nearest": self.random_top_is_nearest},
        }

    @classmethod
    def from_json(cls, data: dict) -> Fidelity:
        with malformed("fidelity"):
            random = data["random"]
            return cls(
                float(data["mean_rank"]),
                float(data["top_is_nearest"]),
                float(random["mean_rank"]),
                float(random["top_is_nearest"]),
            )


def squared_distances(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """[n, m]: squared 2-D distance of each key from each query."""
    return ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)


def key_ranks(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """[n, n]: rank of key j by 2-D distance from query i among the n keys, 1 + the number strictly nearer."""
    from scipy.stats import rankdata

    return rankdata(squared_distances(queries, keys), method="min", axis=1).astype(np.int64)


CHUNK_ELEMENTS = 1 << 20  # the padded distances of a chunk of inputs, [inputs, n, n], stay under this many floats


def _chunk_ranks(coords: np.ndarray, n_all: int, starts: np.ndarray, sizes: np.ndarray, top_keys: np.ndarray):
    """For the queries of inputs of similar length (padded to the longest), per query: the rank of its top key, a
    random key's mean rank and its chance of being the nearest ((n + 1) / 2 and 1 / n without ties in the row)."""
    m = int(sizes.max())
    valid = np.arange(m)[None] < sizes[:, None]  # [inputs, m]
    at = np.where(valid, starts[:, None] + np.arange(m)[None], 0)
    queries, keys = coords[at], coords[n_all + at]  # [inputs, m, 2]
    dx = queries[:, :, None, 0] - keys[:, None, :, 0]
    dy = queries[:, :, None, 1] - keys[:, None, :, 1]
    distances = dx * dx + dy * dy  # [inputs, query, key]
    distances[~np.broadcast_to(valid[:, None, :], distances.shape)] = np.inf  # padding keys are never nearer
    top = np.take_along_axis(distances, top_keys[at][..., None], -1)
    top_ranks = 1 + (distances < top).sum(-1)
    random_ranks = np.broadcast_to((sizes[:, None] + 1) / 2, valid.shape).copy()
    random_nearest = np.broadcast_to(1 / sizes[:, None], valid.shape).copy()
    ordered = np.sort(distances, -1)
    tied = ((ordered[..., 1:] == ordered[..., :-1]) & np.isfinite(ordered[..., 1:])).any(-1) & valid
    for b, i in zip(*np.nonzero(tied)):  # two keys at one distance (a repeated point): count the ranks exactly
        ranks = key_ranks(queries[b, i : i + 1], keys[b, : int(sizes[b])])[0]
        random_ranks[b, i], random_nearest[b, i] = ranks.mean(), (ranks == 1).mean()
    return top_ranks[valid], random_ranks[valid], random_nearest[valid]


def fidelity(coords: np.ndarray, n_tokens: Sequence[int], top_keys: np.ndarray) -> Fidelity:
    """The fidelity of a picture: coords [2N, 2] (the N queries, then the N keys, inputs one after another with
    n_tokens positions each), top_keys [N] (each query's highest-attention key, a position in its own input).
    Each query's numbers come first, then their mean over every query of the corpus."""
    sizes = np.asarray(n_tokens, np.int64)
    n_all = int(sizes.sum())
    starts = np.cumsum(sizes) - sizes
    by_length = np.argsort(sizes, kind="stable")  # chunks of inputs of similar length carry little padding
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    first = 0
    while first < len(by_length):
        last = first + 1
        while last < len(by_length) and (last + 1 - first) * int(sizes[by_length[last]]) ** 2 <= CHUNK_ELEMENTS:
            last += 1
        chunk = by_length[first:last]
        parts.append(_chunk_ranks(coords, n_all, starts[chunk], sizes[chunk], top_keys))
        first = last
    top, random, nearest = (np.concatenate(values) for values in zip(*parts))
    return Fidelity(float(top.mean()), float((top == 1).mean()), float(random.mean()), float(nearest.mean()))


# ------------------------------------------------------------------------------------------ collecting a corpus


def token_classes(result: RunResult) -> list[str]:
    """Each position's class of METHODS §1 (cls, sep, punct: "." and ","; other)."""
    masks = class_masks(result.cls_mask, result.sep_mask, punct_mask(result.tokens, result.special_mask))
    return [CLASS_KEYS[i] for i in masks.argmax(1)]


def token_upos(result: RunResult, item: CorpusInput) -> list[str] | None:
    """Each position's gold UPOS (its word's; "" for special tokens), or None for an input that is not CoNLL-U."""
    if not isinstance(item, Sentence) or not item.upos:
        return None
    return ["" if w is None else item.upos[w] for w in result.word_ids]


def input_text(text: str | list[str] | None) -> str | None:
    """An input's text as the Live page takes it (a CoNLL-U sentence's words joined by spaces)."""
    return text if text is None or isinstance(text, str) else " ".join(text)


@dataclass
class QKInput:
    """One input as the pictures show it: its texts, corpus line, tokens, their classes and gold UPOS."""

    text_a: str
    text_b: str | None
    line: int
    tokens: list[str]
    classes: list[str]
    upos: list[str] | None
    truncated: bool

    @property
    def n(self) -> int:
        return len(self.tokens)


@dataclass
class QKCollector:
    """Accumulator: per input its tokens and, for each head kept, its queries and keys as the dot product sees them
    ([heads kept, n, d] float32) and each query's top key (the argmax of the head's attention row)."""

    heads: tuple[tuple[int, int], ...]  # (layer, head), 0-based
    n_layers: int
    n_heads: int
    inputs: list[QKInput] = field(default_factory=list)
    queries: list[np.ndarray] = field(default_factory=list)
    keys: list[np.ndarray] = field(default_factory=list)
    top_keys: list[np.ndarray] = field(default_factory=list)  # [heads kept, n] int32
    captures: ClassVar[frozenset[Capture]] = frozenset({"attn", "qk"})  # each run's queries and keys

    def add(self, result: RunResult, item: CorpusInput) -> None:
        """Keep one input's tokens and the kept heads' queries, keys and top keys."""
        if result.queries is None or result.keys is None:
            raise UnsupportedModelError("this model's queries and keys cannot be read (see the neuron view).")
        self.queries.append(self._kept(result.queries))
        self.keys.append(self._kept(result.keys))
        self.top_keys.append(self._kept(result.attentions).argmax(-1).astype(np.int32))
        text_b = input_text(item.text_b)
        self.inputs.append(
            QKInput(
                str(input_text(item.text_a)),
                text_b,
                item.line,
                list(result.tokens),
                token_classes(result),
                token_upos(result, item),
                result.truncated,
            )
        )

    @functools.cached_property
    def _every_head(self) -> bool:
        """Whether the kept heads are every head in layer-head order (then an input's arrays are kept as views)."""
        return self.heads == tuple(itertools.product(range(self.n_layers), range(self.n_heads)))

    def _kept(self, per_head: np.ndarray) -> np.ndarray:
        """The kept heads' rows [heads kept, n, ...] of per_head [layers, heads, n, ...], float32: a view for every head."""
        if self._every_head:
            return np.ascontiguousarray(per_head.reshape(len(self.heads), *per_head.shape[2:]), np.float32)
        layers, heads = [l for l, _ in self.heads], [h for _, h in self.heads]
        return np.ascontiguousarray(per_head[layers, heads], np.float32)

    def merge(self, other: QKCollector) -> QKCollector:
        """Both parts' inputs in corpus order (by line; self first on equal lines): Ray shards hold batches."""
        if self.heads != other.heads:
            raise ValueError("Only collections of the same heads can be merged.")
        inputs = self.inputs + other.inputs
        order = sorted(range(len(inputs)), key=lambda i: inputs[i].line)

        def ordered(items: list) -> list:
            return [items[i] for i in order]

        return QKCollector(
            self.heads,
            self.n_layers,
            self.n_heads,
            ordered(inputs),
            ordered(self.queries + other.queries),
            ordered(self.keys + other.keys),
            ordered(self.top_keys + other.top_keys),
        )

    def head_arrays(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The queries [N, d], keys [N, d] and top keys [N] of the index-th kept head over every input, in order."""
        if not self.inputs:
            raise ValueError("no input was collected.")
        return (
            np.concatenate([q[index] for q in self.queries]),
            np.concatenate([k[index] for k in self.keys]),
            np.concatenate([t[index] for t in self.top_keys]),
        )

    def picture(self, index: int, method: str) -> Picture:
        """The index-th kept head's picture by one method, with its fidelity."""
        queries, keys, top = self.head_arrays(index)
        coords = project(joint_points(queries, keys), method)
        layer, head = self.heads[index]
        score = fidelity(coords, [i.n for i in self.inputs], top)
        return Picture(layer, head, method, coords[:, 0].astype(np.float32), coords[:, 1].astype(np.float32), score)


# ------------------------------------------------------------------------------------------------------ results


@dataclass
class Picture:
    """One head's 2-D picture: x and y of its 2N points (the N queries, then the N keys) and its fidelity."""

    layer: int
    head: int
    method: str
    x: np.ndarray  # [2N] float32
    y: np.ndarray
    fidelity: Fidelity

    def packed(self) -> dict:
        """The picture as the JSON's grid and pictures hold it: each axis packed (PACK_BITS)."""
        bits = PACK_BITS[self.method]
        return {
            "layer": self.layer,
            "head": self.head,
            "method": self.method,
            "fidelity": self.fidelity.to_json(),
            "x": pack(self.x, bits),
            "y": pack(self.y, bits),
        }

    @classmethod
    def from_packed(cls, data: dict, n_points: int) -> Picture:
        with malformed("picture"):
            x, y = unpack(data["x"]), unpack(data["y"])
            if len(x) != n_points or len(y) != n_points:
                raise ResultFileError(f"a picture has {len(x)} points where the result has {n_points}.")
            method = str(data["method"])
            if method not in METHODS:
                raise ResultFileError(f"a picture's method {method!r} is none of {', '.join(METHODS)}.")
            return cls(int(data["layer"]), int(data["head"]), method, x, y, Fidelity.from_json(data["fidelity"]))


def pack(values: np.ndarray, bits: int) -> dict:
    """Numbers as codes 0..2^bits - 1 over [lo, hi], little-endian bytes in base64 (8 or 16 bits)."""
    values = np.asarray(values, np.float64)
    lo, hi = (float(values.min()), float(values.max())) if len(values) else (0.0, 0.0)
    top = 2**bits - 1
    codes = np.rint((values - lo) / (hi - lo) * top) if hi > lo else np.zeros(len(values))
    dtype = "<u2" if bits == 16 else "u1"
    return {"lo": lo, "hi": hi, "bits": bits, "codes": base64.b64encode(codes.astype(dtype).tobytes()).decode()}


def unpack(data: dict) -> np.ndarray:
    """pack's numbers back (float32), exact to (hi - lo) / (2^bits - 1) / 2."""
    bits = int(data["bits"])
    if bits not in (8, 16):
        raise ResultFileError(f"packed numbers of {bits} bits; this attnlib reads 8 or 16.")
    codes = np.frombuffer(base64.b64decode(data["codes"]), dtype="<u2" if bits == 16 else "u1")
    lo, hi = float(data["lo"]), float(data["hi"])
    return (lo + codes.astype(np.float64) * ((hi - lo) / (2**bits - 1))).astype(np.float32)


@dataclass
class QKResult:
    """Queries and keys in one picture: the corpus's tokens (the points' order), the asked head's picture, and with
    --all-heads the PCA of every head (the grid), with --every-method every head's t-SNE and UMAP too."""

    layer: int
    head: int
    method: str
    n_layers: int
    n_heads: int
    inputs: list[QKInput]
    pictures: dict[tuple[int, int, str], Picture]
    has_grid: bool = False
    n_truncated: int = 0

    @property
    def n_tokens(self) -> list[int]:
        return [i.n for i in self.inputs]

    @property
    def n_points(self) -> int:
        """2N: every query and every key."""
        return 2 * sum(self.n_tokens)

    @property
    def asked(self) -> Picture:
        """The picture of the asked head and method (the JSON's `points`)."""
        return self.pictures[(self.layer, self.head, self.method)]

    def picture(self, layer: int, head: int, method: str) -> Picture | None:
        """One head's picture by one method, if the result holds it."""
        return self.pictures.get((layer, head, method))

    def point_table(self) -> dict[str, list]:
        """Per point (queries, then keys): kind, input, position, token, class (METHODS §1) and gold UPOS ("" where
        none)."""
        one: dict[str, list] = {"input": [], "position": [], "token": [], "class": [], "upos": []}
        for index, item in enumerate(self.inputs):
            one["input"] += [index] * item.n
            one["position"] += list(range(item.n))
            one["token"] += item.tokens
            one["class"] += item.classes
            one["upos"] += item.upos or [""] * item.n
        n = len(one["input"])
        return {"kind": ["query"] * n + ["key"] * n, **{name: values * 2 for name, values in one.items()}}

    @property
    def has_upos(self) -> bool:
        return bool(self.inputs) and all(i.upos is not None for i in self.inputs)

    def to_json(self) -> dict:
        """The `qk` command's JSON: the asked picture's points and fidelity, the inputs, the grid and other pictures."""
        asked = self.asked
        out = {
            "layer": self.layer,
            "head": self.head,
            "method": self.method,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_inputs": len(self.inputs),
            "n_truncated": self.n_truncated,
            "inputs": [{"text_a": i.text_a, "text_b": i.text_b, "line": i.line} for i in self.inputs],
            "points": {**self.point_table(), "x": asked.x.tolist(), "y": asked.y.tolist()},
            "has_upos": self.has_upos,
            "fidelity": asked.fidelity.to_json(),
        }
        others = [p for key, p in self.pictures.items() if key != (self.layer, self.head, self.method)]
        if self.has_grid:
            out["grid"] = [p.packed() for p in others if p.method == "pca"]
        extra = [p.packed() for p in others if p.method != "pca"]
        if extra:
            out["pictures"] = extra
        return out

    @classmethod
    def from_json(cls, data: dict) -> QKResult:
        """Read back a `qk` JSON; ResultFileError when malformed."""
        with malformed("qk result"):
            points = data["points"]
            n_all = len(points["kind"])
            if n_all % 2 or points["kind"][: n_all // 2] != ["query"] * (n_all // 2):
                raise ResultFileError("the points are not the queries followed by the keys.")
            n = n_all // 2
            inputs = []
            for index, item in enumerate(data["inputs"]):
                at = [i for i in range(n) if points["input"][i] == index]
                upos = [points["upos"][i] for i in at] if data["has_upos"] else None
                inputs.append(
                    QKInput(
                        item["text_a"],
                        item["text_b"],
                        int(item["line"]),
                        [points["token"][i] for i in at],
                        [points["class"][i] for i in at],
                        upos,
                        False,
                    )
                )
            if sum(i.n for i in inputs) != n:
                raise ResultFileError("the points do not belong to the inputs listed.")
            layer, head, method = int(data["layer"]), int(data["head"]), str(data["method"])
            asked = Picture(
                layer,
                head,
                method,
                np.asarray(points["x"], np.float32),
                np.asarray(points["y"], np.float32),
                Fidelity.from_json(data["fidelity"]),
            )
            if len(asked.x) != n_all or len(asked.y) != n_all:
                raise ResultFileError("the points' x and y are not one per point.")
            pictures = {(layer, head, method): asked}
            for packed in data.get("grid", []) + data.get("pictures", []):
                p = Picture.from_packed(packed, n_all)
                pictures.setdefault((p.layer, p.head, p.method), p)
            return cls(
                layer,
                head,
                method,
                int(data["n_layers"]),
                int(data["n_heads"]),
                inputs,
                pictures,
                "grid" in data,
                int(data["n_truncated"]),
            )

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Every query and key of the asked head's picture: where it is, its token and class, and its coordinates."""
        import pandas as pd

        asked = self.asked
        frame = pd.DataFrame({**self.point_table(), "x": asked.x, "y": asked.y})
        for column, value in reversed([("model", model), ("layer", self.layer + 1), ("head", self.head + 1),
                                       ("method", self.method)]):  # fmt: skip
            frame.insert(0, column, value)
        return {"Queries and keys": frame}


# ----------------------------------------------------------------------------------------------------- analysis


@dataclass(frozen=True)
class QKOptions(Options):
    """Which head's picture, by which projection, and whether to add every head's (the page's grid)."""

    layer: int = option(0, "the head's layer, 0-based (default %(default)s)", minimum=0)
    head: int = option(0, "the head, 0-based (default %(default)s)", minimum=0)
    method: Method = option("pca", "projection to 2-D: pca, tsne (perplexity 30) or umap (15 neighbours), seed 0")
    all_heads: bool = option(False, "add the PCA of every head (the page's grid)", adds=True)
    every_method: bool = option(
        False, "with --all-heads, add every head's t-SNE and UMAP too (what the app ships; minutes)", adds=True
    )


def qk_heads(lm: LoadedModel, options: QKOptions) -> tuple[tuple[int, int], ...]:
    """The heads to collect: every head with all_heads, else the asked one; OptionError past the model's size,
    UnsupportedModelError for a family whose queries and keys attnlib cannot read."""
    f = lm.facts
    reason = unsupported_reason(lm.encoder.config, "queries_keys")
    if reason is not None:
        raise UnsupportedModelError(f"qk is not supported for this model: {reason}")
    if options.layer >= f.n_layers or options.head >= f.n_heads:
        raise OptionError(
            f"qk: layer {options.layer}, head {options.head} is outside {f.name} (layers 0-{f.n_layers - 1}, "
            f"heads 0-{f.n_heads - 1}, 0-based)."
        )
    if options.every_method and not options.all_heads:
        raise OptionError("qk: --every-method adds to the grid; give --all-heads with it.")
    for method in [options.method] + (["tsne", "umap"] if options.every_method else []):
        if method != "pca":
            optional_module(method)  # before the corpus runs, not after
    if options.all_heads:
        return tuple((l, h) for l in range(f.n_layers) for h in range(f.n_heads))
    return ((options.layer, options.head),)


def qk_accumulators(lm: LoadedModel, options: QKOptions) -> list:
    """One empty collector of the heads the options need."""
    return [QKCollector(qk_heads(lm, options), lm.facts.n_layers, lm.facts.n_heads)]


def qk_result(accumulators: Sequence, options: QKOptions) -> QKResult:
    """The pictures of a filled collector: the asked head by the asked method, and the grid and more when asked."""
    (collected,) = accumulators
    if not collected.inputs:
        raise ValueError("no input was collected.")
    index = {head: i for i, head in enumerate(collected.heads)}
    wanted = [((options.layer, options.head), options.method)]
    if options.all_heads:
        wanted += [(head, "pca") for head in collected.heads]
    if options.every_method:
        wanted += [(head, method) for method in ("tsne", "umap") for head in collected.heads]
    pictures: dict[tuple[int, int, str], Picture] = {}
    for head, method in wanted:
        if (*head, method) not in pictures:
            pictures[(*head, method)] = collected.picture(index[head], method)
    return QKResult(
        options.layer,
        options.head,
        options.method,
        collected.n_layers,
        collected.n_heads,
        collected.inputs,
        pictures,
        options.all_heads,
        sum(i.truncated for i in collected.inputs),
    )


QK: Analysis[QKOptions, QKResult] = Analysis(
    name="qk",
    help="every query and key of a head over a corpus in one 2-D picture (AttentionViz), with its fidelity",
    options=QKOptions,
    reads="corpus",
    result=QKResult,
    methods=(1, 17),
    accumulators=qk_accumulators,
    finish=qk_result,
    conllu_flag=True,
)
