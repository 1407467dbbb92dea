"""The wheel carries the shipped sample panels: the checkout keeps them in the top-level ``sample_panels/`` folder,
and building copies them into the package as ``memtui/sample_panels/`` (see memtui.panel.samples.sample_dir).

It also builds the bootstrap's compiled loops (``memtui/engine/_kernels.c``, loaded with ctypes by
memtui.engine.kernels) where a C compiler is found; without one the install goes on and memtui runs the same
operations in numpy. The loops must round every operation as numpy does: no contraction of a multiply and an add
(-ffp-contract=off, which some compilers and CPUs, aarch64's among them, do by default) and no fast-math."""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

SAMPLES = Path(__file__).resolve().parent / "sample_panels"


class BuildWithSamples(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's folder itself
            return
        target = Path(self.build_lib) / "memtui" / "sample_panels"
        target.mkdir(parents=True, exist_ok=True)
        for panel in sorted(SAMPLES.glob("*.h5")):
            shutil.copy2(panel, target / panel.name)


KERNELS = Extension(
    "memtui.engine._kernels",
    sources=["src/memtui/engine/_kernels.c"],
    extra_compile_args=["-O3", "-ffp-contract=off", "-fno-fast-math"],
    optional=True,  # no compiler: the numpy code runs instead
)

# nanotron's Nanoset blending loop (memtui.orders.blend, ctypes); the same rounding rules, the Python loop without it
BLEND = Extension(
    "memtui.orders._blend",
    sources=["src/memtui/orders/_blend.c"],
    extra_compile_args=["-O3", "-ffp-contract=off", "-fno-fast-math"],
    optional=True,
)

setup(cmdclass={"build_py": BuildWithSamples}, ext_modules=[KERNELS, BLEND])
