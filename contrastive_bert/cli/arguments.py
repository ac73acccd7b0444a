"""Arguments shared by the subcommands, one ``add_*_argument(parser)`` each (as mteb's CLI does),
so every subcommand spells a flag, its help and its error the same way.

The vocabulary: ``--model``; ``--data-dir``; ``--batch-size``; ``--output`` (a file) and
``--output-dir`` (a folder); ``--overwrite`` (the one rule for every output: an existing output is
refused unless ``--overwrite``); ``--datasets`` (train: several), ``--dataset`` (one input data
set), ``--tasks`` (evaluation); ``--split``; ``--device`` (one) and ``--devices`` (several, to encode
a corpus); ``--model-backend`` (what runs the model that encodes: torch or ONNX Runtime; not
``search --backend``, the search over the encoded rows); ``--max-samples`` (the one name of a row
limit; ``train`` has ``--max-train-samples`` and ``--max-eval-samples``, as in Hugging Face's
example scripts); ``--verbose`` / ``--quiet``. Metavars: N (a count), X (a number), FILE, DIR,
NAME(S), JSON. Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_MODEL_HELP = "'default' (the bundled all-MiniLM-L6-v2), a local folder or a hub id"


def comma_list(text: str) -> list[str]:
    """``"stsb, mrpc"`` -> ``["stsb", "mrpc"]`` (argparse ``type``)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def show_default(value: Any) -> str:
    """A default as the user would type it: lists comma-joined, mappings as JSON, None as 'none'."""
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, dict):
        return json.dumps(value) if value else "{}"
    return str(value)


def parse_json_object(text: str | dict, flag: str) -> dict[str, Any]:
    """A JSON object given on the command line; ``ValueError`` (one line, not the usage text) otherwise."""
    if isinstance(text, dict):
        return text
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{flag}: expected a JSON object such as '{{\"scale\": 20}}', got {text!r} ({error.msg})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag}: expected a JSON object such as '{{\"scale\": 20}}', got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse ``type`` for counts such as ``--batch-size``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _with_default(text: str, shown: Any) -> str:
    """Help text plus ``(default: X)`` once, X as the user would type it; nothing for no default."""
    if shown is None or shown is argparse.SUPPRESS:
        return text
    return f"{text} (default: {show_default(shown)})"


def add_model_argument(parser: argparse.ArgumentParser, default: Any = "default", help: str = DEFAULT_MODEL_HELP,
                       shown: Any = None) -> None:
    """``--model``; ``default=None`` makes it required."""
    parser.add_argument("--model", default=default, required=default is None, metavar="MODEL",
                        help=_with_default(help, shown if shown is not None else default))


def add_data_dir_argument(parser: argparse.ArgumentParser, default: Any = None) -> None:
    parser.add_argument("--data-dir", default=default, metavar="DIR",
                        help="folder holding the data sets, one subfolder each (default: $CONTRASTIVE_BERT_DATA, else the hub)")


def add_batch_size_argument(parser: argparse.ArgumentParser, default: Any = 32, help: str = "texts per forward pass",
                            shown: Any = None) -> None:
    parser.add_argument("--batch-size", type=positive_int, default=default, metavar="N",
                        help=_with_default(help, shown if shown is not None else default))


def add_output_argument(parser: argparse.ArgumentParser, help: str, required: bool = False) -> None:
    """``--output``: always a file."""
    parser.add_argument("--output", default=None, required=required, metavar="FILE", help=help)


def add_output_dir_argument(parser: argparse.ArgumentParser, help: str, default: Any = None, required: bool = False,
                            shown: Any = None) -> None:
    """``--output-dir``: always a folder."""
    parser.add_argument("--output-dir", default=default, required=required, metavar="DIR", help=_with_default(help, shown))


def add_overwrite_argument(parser: argparse.ArgumentParser, default: Any = False) -> None:
    parser.add_argument("--overwrite", action="store_true", default=default,
                        help="replace an existing output (without it, an existing output is refused)")


def add_verbosity_arguments(parser: argparse.ArgumentParser, default: Any = argparse.SUPPRESS) -> None:
    """``--verbose`` / ``--quiet``: read once by ``cli.main`` to configure ``logging``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1, default=default,
                       help="log debug messages too")
    group.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1, default=default,
                       help="log errors only")


def add_dataset_argument(parser: argparse.ArgumentParser, help: str, required: bool = True) -> None:
    """``--dataset``: one input data set (a registry name or a local file)."""
    parser.add_argument("--dataset", required=required, metavar="NAME_OR_FILE", help=help)


def add_datasets_argument(parser: argparse.ArgumentParser, help: str, default: Any = None, shown: Any = None) -> None:
    """``--datasets``: comma-separated data sets (registry names or local files)."""
    parser.add_argument("--datasets", type=comma_list, default=default, metavar="NAMES",
                        help=_with_default(help, shown if shown is not None else default))


def add_split_argument(parser: argparse.ArgumentParser, default: str, help: str) -> None:
    """``--split``: the split of a data set to read (train, validation, test)."""
    parser.add_argument("--split", default=default, metavar="SPLIT", help=_with_default(help, default))


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """``--device``: a torch device."""
    parser.add_argument("--device", default=None, metavar="DEVICE",
                        help="torch device such as cpu, cuda or cuda:1 (default: the best available)")


def add_devices_argument(parser: argparse.ArgumentParser) -> None:
    """``--devices``: several torch devices that encode a corpus together (read by :func:`model_devices`)."""
    parser.add_argument("--devices", default=None, metavar="DEVICES",
                        help="encode the corpus on several devices at once, one process each (sentence-transformers' "
                        "multi-process pool): a comma list such as cuda:0,cuda:1 or cpu,cpu; the model loads on the "
                        "first (default: one process, on --device)")


_DEVICE = re.compile(r"[a-z][a-z0-9_]*(:\d+)?")


def model_devices(args: argparse.Namespace) -> tuple[str | None, list[str] | None]:
    """``(device the model loads on, devices that encode the corpus)`` from ``--device`` and
    ``--devices``, checked as text before anything loads: ``ValueError`` for a malformed list (an
    empty entry, ``cuda:x``) or a ``--device`` that is not one of ``--devices``. Without
    ``--devices``: ``(--device, None)``; with it, the model loads on ``--device`` or the first."""
    device, text = getattr(args, "device", None), getattr(args, "devices", None)
    if text is None:
        return device, None
    devices = [part.strip() for part in text.split(",")]
    malformed = [part for part in devices if not _DEVICE.fullmatch(part)]
    if malformed:
        raise ValueError(f"--devices: expected a comma list of torch devices such as cuda:0,cuda:1 or cpu,cpu, got {text!r} "
                         f"({'an empty entry' if '' in malformed else repr(malformed[0])})")
    if device is not None and device not in devices:
        raise ValueError(f"--devices: {text} does not include --device {device}; give --devices alone (the model "
                         "loads on its first device) or a --device among them")
    return device if device is not None else devices[0], devices


def add_model_backend_argument(parser: argparse.ArgumentParser) -> None:
    """``--model-backend torch|onnx|onnx-int8``: what runs the model that encodes texts
    (``load_model(backend=...)``; checked by :func:`check_model_backend`)."""
    from contrastive_bert.models import BACKENDS  # a tuple of names: models imports no torch at import time

    parser.add_argument("--model-backend", choices=BACKENDS, default="torch",
                        help="what runs the model that encodes the texts (not the search over them): torch; torch "
                        "under bf16 autocast (torch-bf16: on a GPU, or a CPU with AVX512_BF16/AMX, faster than fp32 at "
                        "nearly equal scores: docs/results.md); or ONNX "
                        "Runtime on the CPU in one process, fp32 (onnx: torch's embeddings within float rounding) or "
                        "dynamic int8 quantisation of its weights (onnx-int8: embeddings nearly equal); the "
                        "ONNX export is made once per model and cached under ~/.cache/contrastive_bert/onnx "
                        "($XDG_CACHE_HOME/contrastive_bert/onnx); needs pip install \"contrastive_bert[onnx]\" "
                        "(default: torch)")


def check_model_backend(args: argparse.Namespace) -> str:
    """``--model-backend``, checked before anything loads: an ONNX backend encodes on the CPU in this
    process, so ``--devices`` and a ``--device`` other than the CPU are refused, and the extra to
    install is named when onnxruntime is missing; ``torch-bf16`` runs anywhere torch does, with one
    warning where it would encode on a CPU without bf16 instructions. Returns the backend."""
    backend = getattr(args, "model_backend", "torch")
    if backend == "torch":
        return backend
    if backend == "torch-bf16":
        _check_bf16_encoding_device(getattr(args, "device", None), getattr(args, "devices", None))
        return backend
    if getattr(args, "devices", None) is not None:
        raise ValueError(f"--model-backend: {backend} encodes on the CPU in one process; drop --devices {args.devices} "
                         "(several devices need --model-backend torch)")
    device = getattr(args, "device", None)
    if device is not None and device.split(":")[0].strip().lower() != "cpu":
        raise ValueError(f"--model-backend: {backend} runs on the CPU only; drop --device {device}, or use "
                         "--model-backend torch on it")
    from contrastive_bert import models

    try:
        models.check_backend(backend)
    except ValueError as error:
        raise ValueError(f"--model-backend: {str(error).removeprefix('backend: ')}") from None
    return backend


def _check_bf16_encoding_device(device: str | None, devices: str | None) -> None:
    """One warning line when bf16 encoding would run on a CPU without bf16 instructions (emulated
    there: slower than fp32, the opposite of what it is for)."""
    named = [d.strip().lower() for d in (devices.split(",") if devices else [device] if device else [])]
    if named and all(not d.startswith("cpu") for d in named):
        return
    if not named:
        import torch

        if torch.cuda.is_available():
            return
    from contrastive_bert.training.checks import BF16_CPU_FLAGS, cpu_supports_bf16

    if not cpu_supports_bf16():
        logger.warning(
            "--model-backend: torch-bf16 on this CPU, which has no bf16 instructions (%s): bf16 runs emulated and "
            "is likely slower than --model-backend torch", " or ".join(BF16_CPU_FLAGS))


def add_index_arguments(parser: argparse.ArgumentParser, help: str) -> None:
    """``--index-type auto|flat|ivf|hnsw`` (``help``: what it searches, and how) and the two
    approximate indexes' recall knobs ``--nprobe`` (IVF) and ``--ef-search`` (HNSW)."""
    parser.add_argument("--index-type", choices=("auto", "flat", "ivf", "hnsw"), default="auto", help=help)
    parser.add_argument("--nprobe", type=positive_int, default=32, metavar="N",
                        help="ivf: lists searched per query; raise it when recall is low (default: 32)")
    parser.add_argument("--ef-search", type=positive_int, default=128, metavar="N",
                        help="hnsw: candidates kept while searching; raise it when recall is low (default: 128)")


def add_max_samples_argument(parser: argparse.ArgumentParser, help: str, old_names: tuple[str, ...] = ()) -> None:
    """``--max-samples N``: the one spelling of a row limit; ``old_names`` are earlier spellings,
    still accepted but hidden from ``--help``."""
    parser.add_argument("--max-samples", type=positive_int, default=None, metavar="N", help=help)
    for name in old_names:
        parser.add_argument(name, dest="max_samples", type=positive_int, help=argparse.SUPPRESS)


def add_tasks_argument(parser: argparse.ArgumentParser, default: Any = ("stsb",), help: str = "comma-separated evaluation tasks") -> None:
    value = list(default) if isinstance(default, tuple) else default
    parser.add_argument("--tasks", type=comma_list, default=value, metavar="TASKS", help=_with_default(help, default))


def check_output(path: str | Path | None, overwrite: bool, flag: str = "--output") -> Path | None:
    """The one overwrite rule, checked before any work: an existing output is an error unless
    ``overwrite``. Returns the path (None when no output was asked for)."""
    if path is None:
        return None
    path = Path(path).expanduser()
    if path.exists() and not overwrite:
        raise ValueError(f"{flag}: {path} already exists; pass --overwrite to replace it")
    return path


def replace_output(path: Path) -> Path:
    """Remove an existing output file or folder (after ``check_output`` allowed it) and create its parent."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
