"""Write the offline GPU bundle (see scripts/offline_bundle.sh): one folder of at most 50 MiB with
the base model in fp16, the data the named benchmark blocks read, the package source, wheels of
pure-Python dependencies a GPU machine may lack, the repository's run logs and run.sh.

    python scripts/offline/build_bundle.py DIR [--benchmarks a,b] [--model PATH] [--no-wheels]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OFFLINE = REPO / "scripts" / "offline"
LIMIT_MIB = 50
# Pure-Python wheels the GPU image lacks (datasets and the two it needs that are not there), at
# the versions this repository is tested with; python 3.12, any platform.
WHEELS = ("datasets", "dill", "multiprocess")
SOURCE = ("contrastive_bert", "eval", "scripts/offline", "scripts/recipes", "pyproject.toml")
MODEL_EXTRAS = ("README.md", "data_config.json", ".gitattributes")  # not read when loading


def installed_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def download_wheels(folder: Path) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    specs = [f"{name}=={installed_version(name)}" for name in WHEELS]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "py", "--implementation", "cp",
                    "--platform", "any", "-d", str(folder), *specs], check=True)
    return sorted(p.name for p in folder.glob("*.whl"))


def add_source(archive: Path) -> str:
    """The package, eval/ and the offline scripts as in the working tree (tracked and new files; no caches)."""
    def skip(info: tarfile.TarInfo):
        name = info.name
        if "__pycache__" in name or name.endswith((".pyc", ".png")) or "/results/" in name or name.endswith("/results"):
            return None
        return info

    with tarfile.open(archive, "w:gz") as tar:
        for entry in SOURCE:
            tar.add(REPO / entry, arcname=entry, filter=skip)
    described = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return described.stdout.strip() or "unknown"


def add_data(folder: Path, names: list[str], data_dir: Path, compression: str) -> Path:
    missing = [n for n in names if not (data_dir / n).is_dir()]
    if missing:
        raise SystemExit(f"--data-dir: {data_dir} lacks {missing}")
    archive = folder / f"data.tar.{compression}"
    with tarfile.open(archive, f"w:{compression}", **({"preset": 6} if compression == "xz" else {})) as tar:
        for name in names:
            tar.add(data_dir / name, arcname=name)
    return archive


def du_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def readme(blocks: list[dict], info: dict) -> str:
    rows = "\n".join(f"| {i} | `{b['name']}` | {b['question']} | `eval/{b['script']} {' '.join(b['args'])}` | "
                     f"{b['share']:.0%} | unknown until a first GPU run: see `out/timing.json` |" for i, b in enumerate(blocks, 1))
    return (OFFLINE / "README.template.md").read_text(encoding="utf-8").format(
        rows=rows, blocks=",".join(b["name"] for b in blocks), **info)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    from contrastive_bert.models import save_half_precision

    all_blocks = json.loads((OFFLINE / "blocks.json").read_text(encoding="utf-8"))["blocks"]
    names = [b["name"] for b in all_blocks]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="the bundle folder to write (must not exist, or be empty)")
    parser.add_argument("--benchmarks", default=",".join(names), help=f"blocks, in run order (default: {','.join(names)})")
    parser.add_argument("--model", default="default", help="base model folder (default: the bundled all-MiniLM-L6-v2)")
    parser.add_argument("--data-dir", type=Path, default=None, help="data root (default: $CONTRASTIVE_BERT_DATA or ../shared/data)")
    parser.add_argument("--compression", choices=("xz", "gz"), default="xz", help="data archive (xz: smallest; gz: fastest)")
    parser.add_argument("--no-wheels", action="store_true", help="no wheels (the target has datasets; no registry needed here)")
    args = parser.parse_args(argv)
    chosen = [n.strip() for n in args.benchmarks.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in names]
    if unknown or not chosen:
        raise SystemExit(f"--benchmarks: unknown {unknown or 'none given'}; known: {', '.join(names)}")
    blocks = [next(b for b in all_blocks if b["name"] == n) for n in chosen]
    import os

    data_dir = args.data_dir or Path(os.environ.get("CONTRASTIVE_BERT_DATA") or REPO.parent / "shared" / "data")
    out = args.dir
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out}: exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:  # fp16 halves the weights, gzip takes another 8%
        model = save_half_precision(args.model, Path(scratch) / "model")
        for extra in MODEL_EXTRAS:
            (model / extra).unlink(missing_ok=True)
        with tarfile.open(out / "model.tar.gz", "w:gz") as tar:
            tar.add(model, arcname="model")
    data = sorted({name for b in blocks for name in b["data"]})
    add_data(out, data, data_dir, args.compression)
    revision = add_source(out / "src.tar.gz")
    wheels = [] if args.no_wheels else download_wheels(out / "wheels")
    results = out / "results"
    results.mkdir()
    for block in blocks:  # runs done before are skipped there (and tuning choices stay the same)
        if block["run_log"] and (REPO / "eval" / "results" / block["run_log"]).is_file():
            shutil.copyfile(REPO / "eval" / "results" / block["run_log"], results / block["run_log"])
    shutil.copyfile(OFFLINE / "run.sh", out / "run.sh")
    (out / "run.sh").chmod(0o755)
    (out / "blocks.txt").write_text(",".join(chosen) + "\n")
    info = {"revision": revision, "data": ", ".join(data), "wheels": ", ".join(wheels) or "none",
            "model": str(args.model), "size_mib": 0.0}
    (out / "README.md").write_text(readme(blocks, info))
    size = du_mib(out)
    info["size_mib"] = round(size, 1)
    (out / "README.md").write_text(readme(blocks, info))
    (out / "bundle.json").write_text(json.dumps({**info, "blocks": chosen}, indent=1) + "\n")
    print(f"wrote {out}: {size:.1f} MiB (limit {LIMIT_MIB}); blocks {','.join(chosen)}; data {', '.join(data)}")
    if size > LIMIT_MIB:
        print(f"warning: {out} is {size:.1f} MiB, over the {LIMIT_MIB} MiB limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
