"""The compiled loop's interface is checked when it loads: a library built from another version of ``_kernels.c``, or
whose ``studentise_t`` the C compiler laid out otherwise than the ctypes mirror, is not called (a drifted struct or
signature would read and write the wrong memory, silently). It falls back to the numpy code with a warning, or is an
error where the compiled loop is required (``MEMTUI_REQUIRE_KERNELS=1``)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from memtui.engine import kernels

SOURCE = Path(kernels.__file__).with_name("_kernels.c")


def _build(tmp_path: Path, *defines: str) -> ctypes.CDLL:
    """``_kernels.c`` compiled as setup.py compiles it, with extra ``-D`` definitions."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler here")
    lib = tmp_path / "_kernels_test.so"
    flags = ["-O1", "-ffp-contract=off", "-shared", "-fPIC", *(f"-D{d}" for d in defines)]
    subprocess.run([cc, *flags, str(SOURCE), "-o", str(lib)], check=True)
    return ctypes.CDLL(str(lib))


def test_the_source_as_built_matches_its_mirror(tmp_path):
    assert kernels.mismatch(_build(tmp_path)) is None
    assert len(kernels.mirror_layout()) == 1 + len(kernels._StudentiseC._fields_)


def test_a_library_of_another_interface_version_is_not_called(tmp_path):
    problem = kernels.mismatch(_build(tmp_path, f"KERNELS_ABI={kernels.ABI + 1}"))
    assert problem == f"its interface is version {kernels.ABI + 1}, this memtui's is {kernels.ABI}"


class _Library:
    """Stands in for a built library whose ``studentise_layout`` reports ``layout``."""

    def __init__(self, layout: list[int]) -> None:
        def abi():
            return kernels.ABI

        def studentise_layout(out, n):
            values = ctypes.cast(out, ctypes.POINTER(ctypes.c_int64))
            for i, value in enumerate(layout[:n]):
                values[i] = value
            return len(layout) - 1

        self.kernels_abi, self.studentise_layout = abi, studentise_layout


def test_a_struct_laid_out_otherwise_is_not_called():
    right = kernels.mirror_layout()
    assert kernels.mismatch(_Library(right)) is None
    moved = [*right[:5], right[5] + 4, *right[6:]]  # one field 4 bytes further on: a field added or widened in C
    assert "laid out as" in kernels.mismatch(_Library(moved))
    longer = [right[0] + 8, *right[1:], right[0]]  # a field appended in C only
    assert "laid out as" in kernels.mismatch(_Library(longer))
    shorter = [right[0] - 8, *right[1:-1]]
    assert "laid out as" in kernels.mismatch(_Library(shorter))


def test_a_library_without_an_interface_version_is_not_called():
    assert "older _kernels.c" in kernels.mismatch(object())


def test_a_library_not_used_warns_or_is_an_error_where_required(monkeypatch):
    monkeypatch.delenv("MEMTUI_REQUIRE_KERNELS", raising=False)
    with pytest.warns(RuntimeWarning, match="not used: drifted; reinstall memtui"):
        kernels._not_used(Path("_kernels.so"), "drifted")
    monkeypatch.setenv("MEMTUI_REQUIRE_KERNELS", "1")
    with pytest.raises(ImportError, match="not used: drifted"):
        kernels._not_used(Path("_kernels.so"), "drifted")
