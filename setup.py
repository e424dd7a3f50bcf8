"""tvm-cim: a TVM extension compiling neural networks for in-memory computing.

Packages: ``tvm_cim`` (CIM crossbar chips) and ``tvm_pim`` (bank-level PIM DRAM).
Hardware presets (``targets/*.toml``) and tuned schedule databases
(``schedules/``) are installed under ``<prefix>/share/tvm_cim``.
"""

from pathlib import Path

from setuptools import find_packages, setup

here = Path(__file__).parent


def _data(folder):
    files = [str(p) for p in sorted((here / folder).rglob("*")) if p.is_file()]
    by_dir = {}
    for f in files:
        rel = Path(f).relative_to(here)
        by_dir.setdefault(str(Path("share/tvm_cim") / rel.parent), []).append(str(rel))
    return list(by_dir.items())


setup(
    name="tvm-cim",
    version="0.1.0",
    description="TVM extension: compile CNNs and LLMs for computing-in-memory crossbars and bank-level PIM, "
    "with a bit-accurate simulator",
    long_description=(here / "README.md").read_text() if (here / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["tvm_cim", "tvm_cim.*", "tvm_pim", "tvm_pim.*"]),
    data_files=_data("targets") + _data("schedules"),
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
        "onnxruntime>=1.18",
        # same library as xgboost without the 470 MB NCCL wheel
        "xgboost-cpu>=2.0",
        "tqdm",
        "matplotlib",
        "highspy",
    ],
    extras_require={"test": ["pytest", "hypothesis"]},
    entry_points={"console_scripts": ["tvm-cim=tvm_cim.cli:main"]},
)
