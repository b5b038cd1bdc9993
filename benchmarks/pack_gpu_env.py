#!/usr/bin/env python3
"""Pack what a device machine lacks for benchmarks/run_gpu_benchmark.sh into ``.gpu_carry/``.

Run here, with the repository's venv (network only for the few compiled wheels)::

    .venv/bin/python benchmarks/pack_gpu_env.py          # -> .gpu_carry/{site.tar.gz,fsdd/recordings}

A GPU machine without network access that has Python 3.12
with torch, torchaudio, numpy, scipy, sentencepiece, ... but no ESPnet, and no network.
This script:

1. imports what the benchmark imports (ESPnet's ASR task, trainer pieces, tokenizer,
   the plugin) and lists the distributions those modules come from;
2. drops those the GPU image already has (``GPU_IMAGE_HAS``, from KINDS.md's
   package list) and torch's own;
3. copies the remaining *pure-Python* distributions (their files as listed in
   ``RECORD``, byte code left out) from this venv into ``site/``;
4. for each remaining distribution with compiled CPython extension modules (here:
   ``cffi``, which ``soundfile`` needs), downloads the matching CPython 3.12
   manylinux wheel of the *same version* with ``pip download`` and unpacks it into
   ``site/`` (fails with the pip command if that is not possible);
5. writes ``.gpu_carry/site.tar.gz`` and copies the FSDD recordings to
   ``.gpu_carry/fsdd/recordings`` (``../shared`` does not travel to a device machine).

``.gpu_carry/`` is git-ignored; the device tool's ``carry: [".gpu_carry"]`` takes it
along (its limit: 64 MiB with the working tree).  Prints the sizes.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as md
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
# Modules the benchmark (and recipe stages 1-5) import, directly or in DataLoader workers.
ENTRY_MODULES = (
    "espnet_dynres",
    "espnet2.tasks.asr",
    "espnet2.train.trainer",
    "espnet2.train.preprocessor",
    "espnet2.text.build_tokenizer",
    "espnet2.bin.tokenize_text",
    "espnet2.asr.frontend.default",
    "espnet2.torch_utils.device_funcs",
    "espnet2.torch_utils.set_all_random_seed",
    "espnet2.utils.config_argparse",
    "espnet2.asr.encoder.conformer_encoder",
    "espnet2.asr.decoder.transformer_decoder",
    "espnet2.asr.specaug.specaug",
    "espnet2.layers.utterance_mvn",
    "espnet2.layers.global_mvn",
    "espnet2.asr.ctc",
    "espnet2.train.dataset",
    "espnet2.train.collate_fn",
    "espnet2.fileio.sound_scp",
    "espnet2.schedulers.warmup_lr",
    "espnet2.samplers.num_elements_batch_sampler",
    "soundfile",
    "tqdm",
    "yaml",
)
# Distributions in the device machine's image ('cuda'), as KINDS.md lists them (normalized names).
GPU_IMAGE_HAS = set("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax
opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy
seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy
tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())
NOT_CARRIED = {"espnet-dynres"}  # the repository itself travels as the working tree
PIP_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
MIB = 1024 * 1024


def normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def needed_distributions() -> Dict[str, md.Distribution]:
    """Distributions of every module loaded after importing ``ENTRY_MODULES``, by normalized name."""
    for name in ENTRY_MODULES:
        importlib.import_module(name)
    from espnet2.tasks.asr import ASRTask

    ASRTask.get_parser()  # its option types import more (configargparse, ...)
    top_to_dists = md.packages_distributions()
    found: Dict[str, md.Distribution] = {}
    for module in list(sys.modules):
        for dist_name in top_to_dists.get(module.split(".")[0], []):
            key = normalize(dist_name)
            if key not in found:
                found[key] = md.distribution(dist_name)
    return found


def is_compiled(dist: md.Distribution) -> bool:
    """True when the distribution holds CPython extension modules (tied to one Python version)."""
    return any(f.suffix in (".so", ".pyd") and (".cpython-" in f.name or ".abi3." in f.name)
               for f in dist.files or [])


def copy_pure(dist: md.Distribution, site: Path) -> None:
    root = Path(dist.locate_file(""))
    for f in dist.files or []:
        if "__pycache__" in f.parts or f.suffix == ".pyc" or f.parts[0] == "..":
            continue
        src = root / f
        if src.is_file():
            dst = site / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def fetch_cp312_wheel(dist: md.Distribution, site: Path, work: Path) -> None:
    """``pip download`` the CPython 3.12 manylinux wheel of the same version; unpack into ``site``.

    Raises:
        RuntimeError: pip found no such wheel (the command is in the message).
    """
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", "-d", str(work)]
    for plat in PIP_PLATFORMS:
        cmd += ["--platform", plat]
    cmd.append(f"{dist.metadata['Name']}=={dist.version}")
    out = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(work.glob(f"{normalize(dist.metadata['Name']).replace('-', '_')}-{dist.version}-*.whl"))
    if out.returncode != 0 or not wheels:
        raise RuntimeError(f"no CPython 3.12 wheel for {dist.metadata['Name']} {dist.version}: {' '.join(cmd)}\n"
                           f"{out.stdout[-1500:]}{out.stderr[-1500:]}")
    with zipfile.ZipFile(wheels[-1]) as z:
        z.extractall(site)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out_dir", type=Path, default=REPO / ".gpu_carry")
    ap.add_argument("--fsdd_dir", type=Path, default=REPO.parent / "shared" / "data" / "fsdd" / "recordings")
    args = ap.parse_args()
    if not any(args.fsdd_dir.glob("*.wav")):
        raise SystemExit(f"pack_gpu_env: no FSDD recordings under {args.fsdd_dir}; pass --fsdd_dir")
    dists = needed_distributions()
    carry = {k: d for k, d in sorted(dists.items())
             if k not in GPU_IMAGE_HAS and k not in NOT_CARRIED and not k.startswith("nvidia-")}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        site.mkdir()
        compiled: List[str] = []
        for key, dist in carry.items():
            if is_compiled(dist):
                fetch_cp312_wheel(dist, site, Path(tmp) / "wheels")
                compiled.append(f"{dist.metadata['Name']} {dist.version} (cp312 wheel)")
            else:
                copy_pure(dist, site)
        with tarfile.open(args.out_dir / "site.tar.gz", "w:gz") as tar:
            tar.add(site, arcname="site")
    fsdd_out = args.out_dir / "fsdd" / "recordings"
    if fsdd_out.exists():
        shutil.rmtree(fsdd_out)
    shutil.copytree(args.fsdd_dir, fsdd_out)
    listing = ", ".join(f"{d.metadata['Name']} {d.version}" for d in carry.values())
    (args.out_dir / "MANIFEST.txt").write_text(
        f"site.tar.gz: {listing}\ncompiled (CPython 3.12 wheels): {', '.join(compiled) or 'none'}\n"
        f"fsdd/recordings: copy of {args.fsdd_dir}\n"
    )
    size = sum(p.stat().st_size for p in args.out_dir.rglob("*") if p.is_file())
    print(f"pack_gpu_env: {len(carry)} distributions -> {args.out_dir / 'site.tar.gz'} "
          f"({(args.out_dir / 'site.tar.gz').stat().st_size / MIB:.1f} MiB); FSDD -> {fsdd_out}; "
          f"{args.out_dir} holds {size / MIB:.1f} MiB (device carry limit 64 MiB with the working tree)")
    print(f"carried: {listing}")
    print(f"compiled, fetched for CPython 3.12: {', '.join(compiled) or 'none'}")


if __name__ == "__main__":
    main()
