"""espnet_dynres: dynamic-resolution batching and token-normalized loss for ESPnet2 ASR."""
from setuptools import find_packages, setup

setup(
    name="espnet_dynres",
    version="0.1.0",
    description=(
        "ESPnet2 plugin: dynamic-resolution batch sampler and log-mel frontend, "
        "and a token-normalized ASR loss"
    ),
    packages=find_packages(include=["espnet_dynres", "espnet_dynres.*"]),
    # Tested ranges (docs/install.md): the suite passes with the oldest and the newest release each
    # range admits.  The project's own set-up (install.sh) installs the exact lock in requirements-lock.txt.
    python_requires=">=3.11,<3.12",
    install_requires=[
        "espnet>=202506,<=202511",
        "espnet_model_zoo>=0.1.7,<0.2",
        # torchaudio must match torch's release; pip keeps an installed pair that fits.
        "torch>=2.6,<2.10",
        "torchaudio>=2.6,<2.10",
        # ESPnet's trainer imports these with its default options.
        "tensorboard",
        "matplotlib",
        # Recipe: reading/writing audio, speed perturbation (SoX's resampler), scoring, progress bars.
        "soundfile",
        "soxr",
        "jiwer",
        "tqdm",
        "numpy",
        "pyyaml",
    ],
    extras_require={
        "test": ["pytest", "hypothesis"],
        # benchmarks/sampler_benchmark.py compares against lhotse's DynamicBucketingSampler.
        "bench": ["lhotse"],
    },
    entry_points={
        "console_scripts": [
            # A drop-in for ``python`` in ESPnet's asr.sh (``--python espnet_dynres_python``).
            "espnet_dynres_python=espnet_dynres.glue.launcher:main",
        ]
    },
)
