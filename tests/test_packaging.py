"""A plain `pip install .` gives a memtui that opens its default panel: the checkout's sample_panels/ become package
data, and the estimate cache of a shipped sample goes to the user's cache folder, never into site-packages."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

OPEN_DEFAULT = """
import asyncio, os, pathlib, sys
import memtui
from memtui.app import open_app
from memtui.panel.samples import SAMPLES, default_panel, sample_path

assert "site-packages" in memtui.__file__, memtui.__file__  # the wheel's copy, not the source tree
assert all(sample_path(name).is_file() for name in SAMPLES)
from memtui.engine import kernels
# the wheel carries the bootstrap's compiled loop wherever the build had a C compiler (CI requires it)
assert kernels.available() or os.environ.get("MEMTUI_REQUIRE_KERNELS") != "1", "the wheel has no compiled loop"

async def main():
    app = open_app(None)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.panel.path == default_panel() and app.result is not None
        await pilot.press("q")
    package = pathlib.Path(memtui.__file__).parent
    assert default_panel().parent == package / "sample_panels", default_panel()
    assert not list(package.rglob("*.memtui-cache")), "an estimate cache was written into the installed package"
    assert list(pathlib.Path(os.environ["XDG_CACHE_HOME"], "memtui").rglob("*.parquet")), "no cache entry written"
    print("opened", default_panel().name)

asyncio.run(main())
"""


@pytest.mark.slow
def test_a_wheel_in_a_fresh_environment_opens_its_default_panel(tmp_path):
    # a PYTHONPATH naming a source tree (a developer's, or a test runner's) must not stand in for the wheel's copy
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(ROOT)],
        capture_output=True, text=True, timeout=600, env=clean,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    (wheel,) = dist.glob("memtui-*.whl")
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    python = env / "bin" / "python"
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                             capture_output=True, text=True, timeout=300, env=clean)  # fmt: skip
    assert install.returncode == 0, install.stderr
    # memtui's dependencies come from this environment (nothing can be downloaded here); a plain path line in a .pth
    # does not run that folder's own .pth files, so this environment's editable memtui stays out of the fresh one
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())  # fmt: skip
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    environ = {**clean, "XDG_CACHE_HOME": str(tmp_path / "xdg-cache")}
    opened = subprocess.run([python, "-c", OPEN_DEFAULT], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                            env=environ)  # fmt: skip
    assert opened.returncode == 0, opened.stderr[-3000:]
    assert "opened synthetic.h5" in opened.stdout
    info = subprocess.run([env / "bin" / "memtui", "--sample", "tiny-gptneox", "--help"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert info.returncode == 0 and "--sample" in info.stdout
