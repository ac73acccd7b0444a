"""Banking77 (Casanueva et al. 2020): online-banking queries labelled with 77 intents."""

from __future__ import annotations

import json
from pathlib import Path

from contrastive_bert.data.readers import read_csv_records, require_file
from contrastive_bert.data.spec import DatasetSpec, MtebCard


def read_file(path: Path) -> dict[str, list]:
    """CSV with header ``text,category``."""
    records = read_csv_records(path)
    return {"text": records["text"], "label": records["category"]}


def read_label_names(folder: Path) -> list[str]:
    """The 77 intents in ``categories.json`` order (the label ids)."""
    return json.loads(require_file(folder / "categories.json").read_text(encoding="utf-8"))


DATASET = DatasetSpec(
    name="banking77",
    task_type="classification",
    description="Banking77 intent detection, 77 intents",
    files={"train": "train.csv", "test": "test.csv"},
    read_file=read_file,
    read_label_names=read_label_names,
    hub_id="PolyAI/banking77",
    reference="https://arxiv.org/abs/2003.04807",
    mteb=MtebCard("LocalBanking77Classification", stock_task="Banking77Classification", date=("2019-01-01", "2019-12-31")),
)
