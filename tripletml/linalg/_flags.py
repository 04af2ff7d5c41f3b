"""Numba flags shared by the kernels."""

#: Numba fast-math flags for reduction-heavy kernels: re-association lets the
#: k-length dot products vectorize; no "nnan"/"ninf", so NaN/inf checks stay valid.
FAST = {"reassoc", "contract", "nsz", "arcp"}
