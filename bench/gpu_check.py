"""GPU check (under 3 minutes on one CUDA device): run with the `device` tool when a GPU is lent.

1. An instrumented training loop on CUDA under ``torch.cuda.set_sync_debug_mode("error")``: any
   device synchronization anywhere in the process (training thread, pipeline, sampler) raises, so
   finishing proves telemetry adds none.
2. CUDA-event phase times from telemetry agree with torch.cuda.Event timings taken by hand around
   the same forward phase (median relative difference; target under 5%).
3. A one-rank NCCL all_reduce per step: its time comes from CUDA events (comm_s > 0).
4. NVML readings of this GPU (what the sampler exports), and the MFU of the loop.

Writes a markdown section to --out (for bench/RESULTS.md) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    import telemetry
    from telemetry.analysis.load import open_input
    from telemetry.devices.nvml import open_nvml
    from telemetry.flops import transformer_flops_per_token

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device; nothing to check")
        return 2
    dev = torch.device("cuda:0")
    name = torch.cuda.get_device_name(0)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=dev)
    d, layers, seq, batch = 1024, 8, 512, 8
    layer = torch.nn.TransformerEncoderLayer(d, 16, 4 * d, batch_first=True, dtype=torch.bfloat16, device=dev)
    model = torch.nn.TransformerEncoder(layer, layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    n_params = sum(p.numel() for p in model.parameters())
    fpt = transformer_flops_per_token(n_params, layers, seq, d)
    x = torch.randn(batch, seq, d, device=dev, dtype=torch.bfloat16)
    grads_buf = torch.zeros(n_params, device=dev, dtype=torch.bfloat16)
    result: dict = {"device": name, "params": n_params}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "run")
        telemetry.init(
            run_dir=run_dir,
            job="gpucheck",
            sinks=["store"],
            device_timing="cuda",
            flops_per_token=fpt,
            device_interval_s=0.25,
            flush_interval_s=0.2,
        )
        hand = []
        for _i in range(5):  # warm-up outside the checked region (cuBLAS, NCCL set-up)
            model(x).float().square().mean().backward()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        error = None
        t0 = time.perf_counter()
        try:
            for _i in range(args.steps):
                with telemetry.step(tokens=batch * seq, samples=batch):
                    h0, h1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    with telemetry.phase("forward"):
                        h0.record()
                        loss = model(x).float().square().mean()
                        h1.record()
                    with telemetry.phase("backward"):
                        loss.backward()
                        dist.all_reduce(grads_buf)  # NCCL, through telemetry's wrapper
                    with telemetry.phase("optimizer"):
                        opt.step()
                        opt.zero_grad(set_to_none=True)
                    telemetry.log(loss=loss.detach())
                    hand.append((h0, h1))
        except RuntimeError as exc:  # a synchronization was attempted
            error = str(exc)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        loop_s = time.perf_counter() - t0
        time.sleep(0.6)
        stats = telemetry.shutdown()
        table = open_input(run_dir).table
        result["sync_error"] = error
        result["loop_s"] = loop_s
        result["records"] = stats["records"]
        result["events_dropped"] = stats["events_dropped"]
        by_hand = [a.elapsed_time(b) / 1e3 for a, b in hand]
        ours = table.sort_values("step")["forward_s"].tolist()[: len(by_hand)]
        rel = [abs(o - h) / h for o, h in zip(ours, by_hand) if h > 0]
        result["forward_ms_hand_median"] = statistics.median(by_hand) * 1e3
        result["forward_ms_telemetry_median"] = statistics.median(ours) * 1e3
        result["forward_rel_diff_median"] = statistics.median(rel) if rel else None
        result["comm_ms_median"] = float(table["comm_s"].median() * 1e3)
        result["step_ms_median"] = float(table["duration_s"].median() * 1e3)
        result["host_step_ms_median"] = (
            float(table["host.duration_s"].median() * 1e3) if "host.duration_s" in table else None
        )
        result["mfu_median"] = float(table["mfu"].median()) if "mfu" in table else None
        result["loss_logged"] = int(table["log.loss"].notna().sum()) if "log.loss" in table else 0
        dev_cols = sorted(c for c in table.columns if c.startswith("dev."))
        result["dev_columns"] = dev_cols
    src = open_nvml(0)
    result["nvml"] = src.read() if src is not None else None
    dist.destroy_process_group()
    ok = (
        error is None
        and result["forward_rel_diff_median"] is not None
        and result["forward_rel_diff_median"] < 0.05
        and result["comm_ms_median"] > 0
    )
    lines = [
        f"Run on {name} ({time.strftime('%Y-%m-%d')}, `python bench/gpu_check.py`): **{'PASS' if ok else 'FAIL'}**",
        "",
        "| check | result | target |",
        "|---|---|---|",
        f"| synchronizations under set_sync_debug_mode('error'), {args.steps} steps | "
        f"{'none' if error is None else error[:120]} | none |",
        f"| forward, CUDA events by hand (median) | {result['forward_ms_hand_median']:.3f} ms | |",
        f"| forward, telemetry (median) | {result['forward_ms_telemetry_median']:.3f} ms | |",
        f"| median relative difference | {result['forward_rel_diff_median']:.2%} | < 5% |",
        f"| NCCL all_reduce comm_s (median) | {result['comm_ms_median']:.3f} ms | > 0 |",
        f"| GPU step / host step (median) | {result['step_ms_median']:.2f} / {result['host_step_ms_median']} ms | |",
        f"| MFU (median) | {result['mfu_median']} | |",
        f"| records, events dropped, losses read | {result['records']}, {result['events_dropped']}, {result['loss_logged']} | |",
        "",
        "NVML readings:",
        "",
        "```",
        json.dumps(result["nvml"], indent=1, sort_keys=True),
        "```",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    print(json.dumps(result, default=str))
    if args.out:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from results import update_section

        update_section(args.out, "GPU check (bench/gpu_check.py)", text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
