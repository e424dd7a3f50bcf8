"""tvm-cim: a TVM extension compiling neural networks for in-memory computing.

Packages: ``tvm_cim`` (CIM crossbar chips; ``tvm_cim.common`` is what both
backends share) and ``tvm_pim`` (bank-level PIM DRAM).  The hardware presets
(``targets/``) install as the package data ``tvm_cim.targets`` and the tuned
schedule databases (``schedules/``) as ``tvm_pim.schedules``, so a wheel
install finds them with ``importlib.resources``.
"""

from pathlib import Path

from setuptools import find_packages, setup

here = Path(__file__).parent

setup(
    name="tvm-cim",
    version="0.2.0",
    description="TVM extension: compile CNNs and LLMs for computing-in-memory crossbars and bank-level PIM, "
    "with a bit-accurate simulator",
    long_description=(here / "README.md").read_text() if (here / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["tvm_cim", "tvm_cim.*", "tvm_pim", "tvm_pim.*"])
    + ["tvm_cim.targets", "tvm_pim.schedules"],
    package_dir={"tvm_cim.targets": "targets", "tvm_pim.schedules": "schedules"},
    package_data={"tvm_cim.targets": ["*.toml"], "tvm_pim.schedules": ["*/*.json", "README.md"]},
    install_requires=[
        "apache-tvm==0.27.0.post1",
        # 0.1.15.x segfaults in tvm.ir.save_json and every meta-schedule tuning run
        "apache-tvm-ffi==0.1.14.post1",
        # undeclared dependencies of TVM's meta-schedule builder/runner
        "psutil",
        "cloudpickle",
        "numpy>=1.26",
        "scipy>=1.11",
        "onnx>=1.16",
        # same library as xgboost without the 470 MB NCCL wheel
        "xgboost-cpu>=2.0",
        "tqdm",
        "matplotlib",
        "highspy>=1.7",
        "pydantic>=2.6",
        # one BLAS thread for the many small matrix products of the accuracy measurement
        "threadpoolctl>=3.1",
        "deap>=1.4",
        # the timing-only simulator's scoreboard and list scheduler in compiled code (tvm_cim.simulator.compiled)
        "numba>=0.60",
    ],
    extras_require={
        # tests compare with onnxruntime; benchmarks too
        # scikit-learn: the handwritten-digits data set of benchmarks/accuracy.py (shipped inside the package)
        "test": ["pytest", "pytest-xdist", "hypothesis", "onnxruntime>=1.18", "ruff", "ray", "scikit-learn>=1.3"],
        "sweep": ["ray"],
        "bench": ["onnxruntime>=1.18", "scikit-learn>=1.3"],
    },
    entry_points={"console_scripts": ["tvm-cim=tvm_cim.cli:main", "tvm-pim=tvm_pim.cli:main"]},
)
