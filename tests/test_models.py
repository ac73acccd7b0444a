"""Model resolution: ``default`` -> the bundled all-MiniLM-L6-v2, local folders offline, hub ids passed through."""

from __future__ import annotations

import numpy as np
import pytest
import sentence_transformers

from contrastive_bert.models import DEFAULT_MODEL_HUB_ID, bundled_model_path, load_model, resolve_model_name


class RecordingST:
    """Stands in for ``SentenceTransformer`` to see how it is called (never loads anything)."""

    calls: list = []

    def __init__(self, name, device=None, **kwargs):
        RecordingST.calls.append((name, device, kwargs))


@pytest.fixture()
def recording(monkeypatch):
    RecordingST.calls = []
    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", RecordingST)
    return RecordingST.calls


def test_bundled_model_folder_is_complete():
    path = bundled_model_path()
    assert (path / "modules.json").is_file()
    assert (path / "config.json").is_file()


@pytest.mark.parametrize("alias", ["default", DEFAULT_MODEL_HUB_ID, "all-MiniLM-L6-v2"])
def test_default_aliases_resolve_to_bundled_folder(alias):
    assert resolve_model_name(alias) == str(bundled_model_path())


def test_other_names_pass_through():
    assert resolve_model_name("BAAI/bge-small-en-v1.5") == "BAAI/bge-small-en-v1.5"
    assert resolve_model_name("./my-model") == "./my-model"


@pytest.mark.parametrize("bad", ["", "   ", None, 3])
def test_bad_model_names(bad):
    with pytest.raises(ValueError, match="model: expected 'default', a local path or a hub id"):
        resolve_model_name(bad)


def test_missing_local_path_fails_before_loading(tmp_path, recording):
    with pytest.raises(ValueError, match=r"model: local path '/.*nope' does not exist"):
        load_model(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="model: local path './no-such-model' does not exist"):
        load_model("./no-such-model")
    assert recording == []


def test_default_loads_offline(recording):
    load_model("default", device="cpu")
    assert recording == [(str(bundled_model_path()), "cpu", {"local_files_only": True})]


def test_hub_id_is_not_forced_offline(recording, monkeypatch):
    import contrastive_bert.models

    monkeypatch.setattr(contrastive_bert.models, "hub_offline", lambda: False)  # online
    load_model("someone/some-model")
    assert recording == [("someone/some-model", None, {})]


def test_offline_a_cached_hub_model_loads_from_the_cache(recording, monkeypatch):
    import contrastive_bert.models

    monkeypatch.setattr(contrastive_bert.models, "hub_offline", lambda: True)
    monkeypatch.setattr(contrastive_bert.models, "_cached_on_this_machine", lambda repo_id: repo_id == "someone/cached")
    load_model("someone/cached")
    assert recording == [("someone/cached", None, {"local_files_only": True})]
    with pytest.raises(ValueError, match="'someone/other' is not a local folder here, the Hugging Face hub cannot be reached"):
        load_model("someone/other")
    assert len(recording) == 1


def test_hub_offline_reads_the_environment_now(monkeypatch):
    from contrastive_bert.models import hub_offline

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub_offline()


def test_local_folder_round_trip(tiny_model, tmp_path):
    tiny_model.save(str(tmp_path / "saved"))
    loaded = load_model(str(tmp_path / "saved"), device="cpu")
    texts = ["a plane is taking off.", "a man is playing a flute."]
    np.testing.assert_allclose(loaded.encode(texts), tiny_model.encode(texts), atol=1e-6)


@pytest.mark.slow
def test_default_model_really_loads():
    model = load_model("default", device="cpu")
    assert model.get_embedding_dimension() == 384
