"""Model FLOPs and device peaks, for MFU (model FLOPs utilization).

MFU of a step = tokens x flops_per_token / (step time x peak FLOP/s of the device).

>>> transformer_flops_per_token(n_params=124e6, n_layers=12, seq_len=1024, d_model=768) / 1e9
0.857...
"""

from __future__ import annotations

# Dense (no sparsity) peak FLOP/s per GPU from the vendors' data sheets; first match wins, so more
# specific names come first. Override with init(peak_flops=...).
PEAK_FLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("B200", {"fp8": 4.5e15, "bf16": 2.25e15, "fp16": 2.25e15, "tf32": 1.1e15, "fp32": 75e12}),
    ("H200", {"fp8": 1.979e15, "bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12}),
    ("GH200", {"fp8": 1.979e15, "bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12}),
    ("H100 PCIe", {"fp8": 1.513e15, "bf16": 756.5e12, "fp16": 756.5e12, "tf32": 378e12, "fp32": 51.2e12}),
    ("H100 NVL", {"fp8": 1.671e15, "bf16": 835.5e12, "fp16": 835.5e12, "tf32": 417.5e12, "fp32": 60e12}),
    ("H100", {"fp8": 1.979e15, "bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp32": 66.9e12}),
    ("A100", {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12}),
    ("L40S", {"fp8": 733e12, "bf16": 362e12, "fp16": 362e12, "tf32": 183e12, "fp32": 91.6e12}),
    ("L4", {"fp8": 242e12, "bf16": 121e12, "fp16": 121e12, "tf32": 60e12, "fp32": 30.3e12}),
    ("A10G", {"bf16": 70e12, "fp16": 70e12, "tf32": 35e12, "fp32": 31.2e12}),
    ("A10", {"bf16": 125e12, "fp16": 125e12, "tf32": 62.5e12, "fp32": 31.2e12}),
    ("V100", {"fp16": 125e12, "fp32": 15.7e12}),
    ("MI300X", {"fp8": 2.615e15, "bf16": 1.307e15, "fp16": 1.307e15, "tf32": 653.7e12, "fp32": 163.4e12}),
    ("MI250X", {"bf16": 383e12, "fp16": 383e12, "fp32": 47.9e12}),
)
DTYPES = ("fp8", "bf16", "fp16", "tf32", "fp32")


def peak_flops_for(device_name: str | None, dtype: str = "bf16") -> float | None:
    """Peak dense FLOP/s of a device by its name (as NVML or torch report it), or None."""
    if not device_name:
        return None
    name = device_name.upper()
    for key, table in PEAK_FLOPS:
        if key.upper() in name:
            return table.get(dtype)
    return None


def transformer_flops_per_token(n_params: float, n_layers: int, seq_len: int, d_model: int) -> float:
    """Training FLOPs per token of a decoder-only transformer: 6N + 12 L T d.

    6N counts the forward (2N) and backward (4N) matrix multiplies with the N non-embedding
    parameters; 12 L T d adds the attention scores and weighted values (QK^T and AV, forward and
    backward) over a context of T tokens (PaLM, appendix B).
    """
    return 6.0 * n_params + 12.0 * n_layers * seq_len * d_model
