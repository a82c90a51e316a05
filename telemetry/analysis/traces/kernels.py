"""What a profiler trace's GPU activities and collectives are, by HTA's rules: a kernel's kind, a
collective's canonical name, its bytes from the recorded sizes and dtypes, and nccl-tests' bus
bandwidth factors."""

from __future__ import annotations

import math
import re
from typing import Any

KINDS = ("compute", "communication", "memory", "other")
_COMM_RE = re.compile(r"^nccl.*Kernel")
_MEM_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_NCCL_NAME = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
_CPU_COLLECTIVE = ("record_param_comms", "c10d::", "gloo:", "nccl:")
DTYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Int": 4, "Long": 8, "Short": 2, "Char": 1,
    "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
}  # fmt: skip
_CANON = {
    "allreduce": "allreduce", "all_reduce": "allreduce", "allgather": "allgather", "all_gather": "allgather",
    "_allgather_base": "allgather", "allgather_base": "allgather", "reduce_scatter_base": "reduce_scatter", "allgather_into_tensor_coalesced": "allgather",
    "all_gather_into_tensor": "allgather", "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter", "alltoall": "all_to_all", "all_to_all": "all_to_all",
    "alltoall_base": "all_to_all", "all_to_all_single": "all_to_all", "broadcast": "broadcast",
    "reduce": "reduce", "sendrecv": "send_recv", "send": "send", "recv": "recv", "barrier": "barrier",
    "gather": "gather", "scatter": "scatter",
}  # fmt: skip
_SHAPE_TYPES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
}  # fmt: skip


def kernel_kind(name: str) -> str:
    """HTA's kind of a GPU activity by its name."""
    if _COMM_RE.match(name):
        return "communication"
    if _MEM_RE.match(name):
        return "memory"
    if not _NOT_COMPUTE_RE.match(name):
        return "compute"
    return "other"


def collective_name(name: str, args: dict[str, Any] | None = None) -> str:
    """The collective a kernel or CPU range runs, canonical (``allreduce``, ``allgather``, ...)."""
    raw = (args or {}).get("Collective name")
    if not raw:
        m = _NCCL_NAME.match(name)
        if m:
            raw = m.group(1)
        else:
            raw = name.split(":")[-1].strip("_") if ":" in name else name
    key = str(raw).lower()
    return _CANON.get(key, _CANON.get(key.replace("_", ""), key))


def bus_factor(coll: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor of a collective over ``n`` ranks."""
    if n <= 1:
        return 1.0
    if coll == "allreduce":
        return 2.0 * (n - 1) / n
    if coll in ("allgather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def collective_meta(name: str, args: dict[str, Any]) -> tuple[str, float, int]:
    coll = collective_name(name, args)
    try:
        nelems = float(args.get("In msg nelems") or 0)
        out = float(args.get("Out msg nelems") or 0)
    except (TypeError, ValueError):
        nelems = out = 0.0
    size = DTYPE_BYTES.get(str(args.get("dtype")), 0)
    try:
        group = int(args.get("Group size") or 0)
    except (TypeError, ValueError):
        group = 0
    return coll, max(nelems, out) * size, group


def shape_bytes(args: dict[str, Any]) -> float:
    """The bytes of a range's first input from the shapes the profiler records (``record_shapes``:
    ``Input Dims`` [[1000]], ``Input type`` ['float']; a gloo collective's range has them); 0 when
    not recorded or of a type not known."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or not dims or not types:
        return 0.0
    size = _SHAPE_TYPES.get(str(types[0]), 0)
    if not size or not isinstance(dims[0], list) or not all(isinstance(d, int) for d in dims[0]):
        return 0.0
    return float(math.prod(dims[0]) * size)
