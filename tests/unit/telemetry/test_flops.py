"""Model FLOPs per token and device peak FLOPs (telemetry/flops.py), the two halves of MFU."""

from telemetry.flops import peak_flops_for, transformer_flops_per_token


def test_peak_table_and_flops_formula():
    assert peak_flops_for("NVIDIA H100 80GB HBM3") == 989.4e12
    assert peak_flops_for("NVIDIA H100 PCIe", "bf16") == 756.5e12
    assert peak_flops_for("NVIDIA H200", "fp8") == 1.979e15
    assert peak_flops_for("NVIDIA A100-SXM4-80GB", "tf32") == 156e12
    assert peak_flops_for("Tesla V100-SXM2-32GB", "bf16") is None  # no bf16 on V100
    assert peak_flops_for(None) is None and peak_flops_for("Intel Xeon") is None
    # GPT-2 small at 1k context: 6N + 12 L T d
    assert transformer_flops_per_token(124e6, 12, 1024, 768) == 6 * 124e6 + 12 * 12 * 1024 * 768
