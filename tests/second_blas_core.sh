#!/bin/sh
# Prints an OpenBLAS core type (OPENBLAS_CORETYPE) other than the one in use, that this CPU can run: Haswell needs
# AVX2, SkylakeX AVX-512; a kernel the CPU lacks would die of an illegal instruction.
current=${OPENBLAS_CORETYPE:-}
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has() { echo "$flags" | grep -qw "$1"; }
if [ "$current" != "Haswell" ] && has avx2; then
    echo Haswell
elif has avx512f && [ "$current" != "SkylakeX" ]; then
    echo SkylakeX
elif has avx && [ "$current" != "Sandybridge" ]; then
    echo Sandybridge
else
    echo Prescott
fi
