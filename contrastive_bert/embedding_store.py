"""A corpus's embeddings, encoded in chunks into one float32 array that can live on disk and resume.

:func:`encode_corpus` is how every corpus is encoded (mining, the retrieval scorer, ``search``):
``CHUNK_ROWS`` documents per encode call (each call as :func:`~contrastive_bert.embeddings.encode_normalized`
makes it), written into one ``(N, d)`` float32 array. Without a folder the array is in memory;
with one it is a memory-mapped ``embeddings.npy`` beside ``manifest.json``::

    {"format_version": 1, "model_weights": "<sha256 of the weights>", "max_seq_length": 256,
     "corpus": "<sha1 of the ids and texts>", "documents": 5183, "kind": "document",
     "dtype": "float32", "dim": 384, "batch_size": 64, "chunk_rows": 16384, "rows_done": 5183}

``rows_done`` is rewritten (atomically) after each chunk's rows are flushed, so an interrupted
encoding resumes at its first missing chunk, and a finished store is read back instead of encoded
again, for the same model weights and corpus only. Peak memory: the array (a folder's pages are the
OS's to drop) plus one chunk's encoding. A corpus of up to ``CHUNK_ROWS`` documents is one encode
call, exactly as before chunking; a larger one batches texts by length within each chunk, so its
rows can differ from a one-call encoding by float rounding (a resumed store equals an uninterrupted
one bit for bit).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from contrastive_bert.embeddings import encode_normalized

logger = logging.getLogger(__name__)

__all__ = ["CHUNK_ROWS", "CorpusEmbeddings", "check_devices", "corpus_fingerprint", "encode_corpus", "read_manifest",
           "release_freed_memory", "store_folder", "weights_fingerprint", "write_store"]

#: Documents per encode call (and per resumable step of a store on disk).
CHUNK_ROWS = 16_384
FORMAT_VERSION = 1
MANIFEST_FILE, ARRAY_FILE = "manifest.json", "embeddings.npy"
#: Manifest fields that say whose rows a store holds: all must match to reuse any of them.
IDENTITY = ("model_weights", "max_seq_length", "corpus", "documents", "kind")
#: Manifest fields that must match as well to resume an unfinished store (its chunks then batch alike).
RESUME_SETTINGS = ("batch_size", "chunk_rows")


def corpus_fingerprint(ids: Sequence[str], texts: Sequence[str]) -> str:
    """A SHA-1 of the documents in order (ids and texts): equal fingerprints, same corpus."""
    digest = hashlib.sha1()
    for doc_id, text in zip(ids, texts):
        digest.update(doc_id.encode("utf-8") + b"\x00" + text.encode("utf-8") + b"\x01")
    return digest.hexdigest()


def weights_fingerprint(model: Any) -> str | None:
    """A SHA-256 of ``model``'s state dict (names, dtypes, shapes and bytes of every tensor, in
    order): any changed weight changes it, the same weights on another device do not. A model that
    encodes in another precision (``encoding_identity``: bf16 autocast) mixes that in first, so its
    rows are never read as fp32's. None for a model without a ``state_dict`` (an embedding function)."""
    if not callable(getattr(model, "state_dict", None)):
        return None
    digest = hashlib.sha256()
    if (encoding := getattr(model, "encoding_identity", None)) is not None:
        digest.update(f"encoding\x00{encoding}\x00".encode("utf-8"))
    for name, tensor in model.state_dict().items():
        data = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}\x00{data.dtype}\x00{tuple(tensor.shape)}\x00".encode("utf-8"))
        digest.update(data.view(torch.uint8).numpy())
    return digest.hexdigest()


@dataclass(frozen=True)
class CorpusEmbeddings:
    """One corpus's document embeddings and what they were made from.

    Attributes:
        embeddings: (N, d) float32 unit-norm rows in corpus order; a copy-on-write memory map of
            ``folder/embeddings.npy`` when kept in a folder (writing to it never reaches the file).
        fingerprint: :func:`corpus_fingerprint` of the documents the rows encode.
        model_weights: :func:`weights_fingerprint` of the model that encoded them (None: unknown).
        folder: the store's folder, None for an array in memory.
        encoded_rows: rows this call encoded (0: all read back from ``folder``).
    """

    embeddings: np.ndarray
    fingerprint: str
    model_weights: str | None
    folder: Path | None = None
    encoded_rows: int = 0

    def __len__(self) -> int:
        return int(self.embeddings.shape[0])

    def tensor(self) -> torch.Tensor:
        """The rows as a (N, d) float32 tensor sharing the array's memory (no copy)."""
        return torch.from_numpy(self.embeddings)


def store_folder(root: str | Path, fingerprint: str) -> Path:
    """Where a cache folder ``root`` keeps the store of the corpus with ``fingerprint``."""
    return Path(root) / f"corpus-{fingerprint[:16]}"


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    """The manifest of the store in ``folder``; None when it holds none (or an unreadable one)."""
    try:
        manifest = json.loads((Path(folder) / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format_version") == FORMAT_VERSION else None


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    partial = folder / (MANIFEST_FILE + ".partial")
    partial.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    os.replace(partial, folder / MANIFEST_FILE)  # atomic: a kill leaves the old manifest or the new one


def _identity(model, fingerprint: str, documents: int, kind: str) -> dict[str, Any]:
    return {"model_weights": weights_fingerprint(model), "max_seq_length": getattr(model, "max_seq_length", None),
            "corpus": fingerprint, "documents": documents, "kind": kind}


def write_store(folder: str | Path, embeddings: np.ndarray, model, ids: Sequence[str], texts: Sequence[str],
                kind: str = "document") -> CorpusEmbeddings:
    """Write finished (N, d) rows of ``model`` as the store in ``folder`` (an index saved from
    memory); returns them as read back."""
    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST_FILE).unlink(missing_ok=True)
    rows = np.ascontiguousarray(embeddings, dtype=np.float32)
    partial = folder / (ARRAY_FILE + ".partial.npy")
    np.save(partial, rows)
    os.replace(partial, folder / ARRAY_FILE)  # a new file: a memory map of the old one stays valid
    identity = _identity(model, corpus_fingerprint([str(i) for i in ids], list(texts)), len(rows), kind)
    _write_manifest(folder, {"format_version": FORMAT_VERSION, **identity, "dtype": "float32", "dim": int(rows.shape[1]),
                             "batch_size": None, "chunk_rows": None, "rows_done": len(rows)})
    return CorpusEmbeddings(np.load(folder / ARRAY_FILE, mmap_mode="c"), identity["corpus"], identity["model_weights"], folder)


def _difference(manifest: dict[str, Any], identity: dict[str, Any]) -> str | None:
    """What makes the store's rows another's (in words), None when they are this model's and corpus's."""
    if identity["model_weights"] is None:
        return "rows of a model without weights cannot be checked"
    if manifest.get("model_weights") != identity["model_weights"] or manifest.get("max_seq_length") != identity["max_seq_length"]:
        return "another model (its weights or max_seq_length differ)"
    if manifest.get("corpus") != identity["corpus"] or manifest.get("documents") != identity["documents"]:
        return f"another corpus ({manifest.get('documents')} documents)"
    if manifest.get("kind") != identity["kind"]:
        return f"{manifest.get('kind')} embeddings, not {identity['kind']} ones"
    return None


def check_devices(devices: Sequence[str] | None, name: str = "devices") -> list[str] | None:
    """``devices`` as a list of torch devices this machine has (None: none given), checked before
    any model loads; a ``ValueError`` naming ``name`` for an empty list, a non-device, or a device
    this machine lacks (``cuda:3`` with two GPUs)."""
    if devices is None:
        return None
    expected = "a non-empty list of torch devices such as ['cuda:0', 'cuda:1'] or ['cpu', 'cpu']"
    if isinstance(devices, str) or not isinstance(devices, Sequence) or not devices:
        raise ValueError(f"{name}: expected {expected}, got {devices!r}")
    from contrastive_bert.models import check_device

    for device in devices:
        if not isinstance(device, str) or not device.strip():
            raise ValueError(f"{name}: expected {expected}, got {list(devices)!r}")
        try:
            check_device(device)
        except ValueError as error:
            raise ValueError(f"{name}: {str(error).removeprefix('device: ')}") from None
    return list(devices)


@lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc; absent on macOS, Windows, musl
    except (AttributeError, OSError, TypeError):
        return None


def release_freed_memory() -> bool:
    """Hand the memory the C allocator holds freed back to the operating system (glibc's
    ``malloc_trim``); False where there is none. Called between chunks: a chunk's encode calls
    allocate activations of every padded length (a batch of 64 x 256 tokens holds about 200 MB of
    attention scores per layer), and glibc keeps what they free, so without it the resident memory
    of a long encoding creeps up chunk after chunk (on this CPU, bf16: from 0.4 to 1.3 GB over six
    chunks of 2,000 documents without it; back to about 0.5 GB after each chunk with it)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def _open_rows(folder: Path, manifest: dict[str, Any], mode: str) -> np.ndarray | None:
    """The store's array (``mode`` "r+" to write, "c" to read), None if it does not match its manifest."""
    try:
        array = np.load(folder / ARRAY_FILE, mmap_mode=mode)
    except (OSError, ValueError):
        return None
    if array.dtype != np.float32 or array.shape != (manifest.get("documents"), manifest.get("dim")):
        return None
    return array


def encode_corpus(
    model,
    ids: Sequence[str],
    texts: Sequence[str],
    *,
    folder: str | Path | None = None,
    kind: Literal["text", "query", "document"] = "document",
    batch_size: int = 64,
    chunk_rows: int | None = None,
    if_other: Literal["refuse", "replace"] = "refuse",
    show_progress_bar: bool = False,
    devices: Sequence[str] | None = None,
) -> CorpusEmbeddings:
    """``texts`` (ids ``ids``) encoded by ``model``, ``chunk_rows`` per encode call, as (N, d) rows.

    Args:
        model: a SentenceTransformer (``encode_document`` for ``kind="document"``).
        ids / texts: the documents, in the order of the rows.
        folder: keep the rows there (see the module docstring): a store of this model and corpus
            is read back, or resumed at its first missing chunk; None: an array in memory.
        if_other: a ``folder`` holding another model's or corpus's store: ``"refuse"`` (a
            ``ValueError`` naming ``overwrite``) or ``"replace"`` it (a cache folder).
        chunk_rows: documents per encode call and per resumable step (None: :data:`CHUNK_ROWS`).
        batch_size / show_progress_bar: for the encode calls (with several chunks, one bar over them).
        devices: two or more: encode each chunk with sentence-transformers' multi-process pool, one
            process per device (``["cuda:0", "cuda:1"]``, ``["cpu", "cpu"]``); one: encode in this
            process on that device (where the model then stays, as ``model.encode(device=...)``
            leaves it); None: on the model's device.
    """
    chunk_rows = CHUNK_ROWS if chunk_rows is None else chunk_rows
    ids, texts = [str(i) for i in ids], list(texts)
    if not ids or len(ids) != len(texts):
        raise ValueError(f"ids: expected one id per text and at least one document, got {len(ids)} ids for {len(texts)} texts")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ValueError(f"chunk_rows: expected a positive int, got {chunk_rows!r}")
    if if_other not in ("refuse", "replace"):
        raise ValueError(f"if_other: expected 'refuse' or 'replace', got {if_other!r}")
    devices = check_devices(devices)
    if devices is not None and len(devices) > 1 and not callable(getattr(model, "start_multi_process_pool", None)):
        raise ValueError(f"devices: {len(devices)} devices need a SentenceTransformer (its multi-process pool), "
                         f"got a {type(model).__name__}")
    fingerprint = corpus_fingerprint(ids, texts)
    identity = _identity(model, fingerprint, len(ids), kind)
    weights = identity["model_weights"]
    settings = {"batch_size": batch_size, "chunk_rows": chunk_rows}
    array, start = None, 0
    if folder is not None:
        folder = Path(folder).expanduser()
        manifest = read_manifest(folder)
        if manifest is not None and (other := _difference(manifest, identity)) is not None:
            if if_other == "refuse":
                raise ValueError(f"folder: {folder} holds the embeddings of {other}; pass overwrite (--overwrite) "
                                 "to encode this corpus there instead, or choose another folder")
            logger.info("embeddings at %s: %s; encoding again", folder, other)
            manifest = None
        if manifest is not None and manifest["rows_done"] >= len(ids):
            rows = _open_rows(folder, manifest, "c")
            if rows is not None:
                logger.info("embeddings at %s: all %d documents read back (encoded before)", folder, len(ids))
                return CorpusEmbeddings(rows, fingerprint, weights, folder, 0)
            manifest = None
        if manifest is not None and manifest["rows_done"] > 0:
            same = all(manifest.get(name) == value for name, value in settings.items())
            array = _open_rows(folder, manifest, "r+") if same else None
            if array is not None:
                start = manifest["rows_done"]
                logger.info("embeddings at %s: resuming at document %d of %d", folder, start + 1, len(ids))
            else:
                logger.info("embeddings at %s: unfinished with other settings (%s); encoding again", folder,
                            {name: manifest.get(name) for name in settings})
        if start == 0:  # only this store's own files go: the folder may hold others (an index's documents)
            folder.mkdir(parents=True, exist_ok=True)
            for name in (MANIFEST_FILE, ARRAY_FILE):  # the manifest first: it never outlives its rows
                (folder / name).unlink(missing_ok=True)
    chunks = range(start, len(ids), chunk_rows)
    several = len(range(0, len(ids), chunk_rows)) > 1
    bar = tqdm(total=len(ids), initial=start, desc=f"Encoding {len(ids)} documents", unit="doc",
               disable=not (show_progress_bar and several))
    manifest = None
    pool, home = None, None
    options = {"device": devices[0]} if devices is not None and len(devices) == 1 else {}
    try:
        for begin in chunks:
            if pool is None and devices is not None and len(devices) > 1:  # started once, for the chunks left
                home = getattr(model, "device", None)
                logger.info("encoding on %d devices, one process each: %s", len(devices), ", ".join(devices))
                pool = options["pool"] = model.start_multi_process_pool(target_devices=devices)
            end = min(begin + chunk_rows, len(ids))
            rows = encode_normalized(model, texts[begin:end], kind=kind, batch_size=batch_size,
                                     show_progress_bar=show_progress_bar and not several, **options).numpy()
            if array is None:
                if folder is None and not several:
                    array = rows  # one chunk: the encoding is the array
                elif folder is None:
                    array = np.empty((len(ids), rows.shape[1]), dtype=np.float32)
                else:
                    array = np.lib.format.open_memmap(folder / ARRAY_FILE, mode="w+", dtype=np.float32,
                                                      shape=(len(ids), rows.shape[1]))
            if array is not rows:
                array[begin:end] = rows
            if folder is not None:
                array.flush()
                manifest = {"format_version": FORMAT_VERSION, **identity, "dtype": "float32", "dim": int(array.shape[1]),
                            **settings, "rows_done": end}
                _write_manifest(folder, manifest)
            bar.update(end - begin)
            release_freed_memory()
    finally:
        bar.close()
        if pool is not None:  # also on an error or Ctrl-C: no worker outlives the call
            model.stop_multi_process_pool(pool)
        if home is not None:
            model.to(home)  # starting the pool moved the model to the CPU
    encoded = len(ids) - start
    if folder is None:
        return CorpusEmbeddings(array, fingerprint, weights, None, encoded)
    del array  # flushed: read back copy-on-write, so that no caller writes into the file
    return CorpusEmbeddings(np.load(folder / ARRAY_FILE, mmap_mode="c"), fingerprint, weights, folder, encoded)
