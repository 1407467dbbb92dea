"""The wheel carries the shipped sample panels: the checkout keeps them in the top-level ``sample_panels/`` folder,
and building copies them into the package as ``memtui/sample_panels/`` (see memtui.panel.samples.sample_dir)."""

import shutil
from pathlib import Path

from setuptools import setup
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


setup(cmdclass={"build_py": BuildWithSamples})
