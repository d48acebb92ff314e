"""Array type aliases shared by the whole package, defined once."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

B = npt.NDArray[np.bool_]
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
U16 = npt.NDArray[np.uint16]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
Floats = npt.NDArray[np.floating]
Records = npt.NDArray[np.void]
