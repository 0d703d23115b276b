#!/usr/bin/env python3
"""What a collective beside a GEMM costs the GEMM, on two GPUs of one host (issue 32's tensor-parallel gap).

Run under `NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=2 scripts/gpu/overlap_probe.py`. Times, with CUDA
events, the 1.3B model's TP2 products ([8192, 2048] rows, bf16) alone and with a transfer running beside them on a
second stream:
  - NCCL's all-reduce (32 MiB, the TP2 forward's), all-gather and reduce-scatter;
  - the same with libtorch's SM carveout for the products (torch._C._set_sm_carveout_experimental), where it exists;
  - a copy-engine push of 16 MiB into the peer's memory (torch's symmetric memory: cudaMemcpyAsync into the peer's
    buffer, no SMs);
  - PyTorch's fused all-gather + matmul (torch.ops.symm_mem.fused_all_gather_matmul, async TP) against the all-gather
    and the product one after the other.
Rank 0 prints one line per case: the product's and the transfer's time alone, the pair's time together, and the
overlap's gain (alone one after the other minus together). `--selftest` checks the arithmetic without a GPU.
"""
import argparse
import os
import sys


def gain_line(name, gemm_us, xfer_us, together_us):
    serial = gemm_us + xfer_us
    hidden = serial - together_us
    frac = hidden / xfer_us if xfer_us > 0 else 0.0
    return (f"overlap-probe {name}: product {gemm_us:.1f} us, transfer {xfer_us:.1f} us, one after the other "
            f"{serial:.1f} us, together {together_us:.1f} us | hidden {hidden:.1f} us ({100 * frac:.0f}% of the transfer)")


def selftest():
    line = gain_line("x", 100.0, 50.0, 110.0)
    assert "hidden 40.0 us (80% of the transfer)" in line, line
    assert "one after the other 150.0 us" in line, line
    print("selftest: PASS")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--rows", type=int, default=8192)
    a = ap.parse_args()
    if a.selftest:
        selftest()
        return
    import torch
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    dev = torch.device("cuda")
    bf = torch.bfloat16
    main_s = torch.cuda.current_stream()
    side = torch.cuda.Stream()

    def out(msg):
        if rank == 0:
            print(msg, flush=True)

    def time_us(fn, iters=a.iters):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(iters):
            fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) * 1000 / iters

    def together(gemm, xfer):
        def fn():
            side.wait_stream(main_s)
            with torch.cuda.stream(side):
                xfer()
            gemm()
            main_s.wait_stream(side)
        return fn

    n, h = a.rows, 2048
    x = torch.randn(n, h, device=dev, dtype=bf)
    products = {
        "qkv [8192,2048]x[2048,3072]": (x, torch.randn(h, 3072, device=dev, dtype=bf)),
        "fc1 [8192,2048]x[2048,4096]": (x, torch.randn(h, 4096, device=dev, dtype=bf)),
        "fc2 [8192,4096]x[4096,2048]": (torch.randn(n, 4096, device=dev, dtype=bf), torch.randn(4096, h, device=dev, dtype=bf)),
    }
    ar = torch.randn(n, h, device=dev, dtype=bf)
    shard = torch.randn(n // world, h, device=dev, dtype=bf)
    gathered = torch.empty(n, h, device=dev, dtype=bf)
    transfers = {
        "all-reduce 32 MiB": lambda: dist.all_reduce(ar),
        "all-gather 16 MiB shards": lambda: dist.all_gather_into_tensor(gathered, shard),
        "reduce-scatter 32 MiB": lambda: dist.reduce_scatter_tensor(shard, ar),
    }
    try:
        import torch.distributed._symmetric_memory as symm_mem
        buf = symm_mem.empty(n // world, h, device=dev, dtype=bf)
        handle = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
        peer = handle.get_buffer((rank + 1) % world, (n // world, h), bf)
        transfers["copy-engine push 16 MiB to the peer"] = lambda: peer.copy_(shard)
    except Exception as ex:  # noqa: BLE001 - report and go on
        out(f"overlap-probe: no symmetric memory ({type(ex).__name__}: {ex})")
        handle = None

    out(f"overlap-probe: {torch.cuda.get_device_name()} x{world}, torch {torch.__version__}, NCCL "
        f"{'.'.join(map(str, torch.cuda.nccl.version()))}, {torch.cuda.get_device_properties(0).multi_processor_count} SMs")
    alone_x = {k: time_us(f) for k, f in transfers.items()}
    for pname, (p, w) in products.items():
        g = lambda p=p, w=w: torch.matmul(p, w)  # noqa: E731
        g_us = time_us(g)
        for tname, t in transfers.items():
            out(gain_line(f"{pname} beside {tname}", g_us, alone_x[tname], time_us(together(g, t))))
    carve = getattr(torch._C, "_set_sm_carveout_experimental", None)
    if carve is not None:
        p, w = products["fc1 [8192,2048]x[2048,4096]"]
        for sms in (16, 32):
            g = lambda: torch.matmul(p, w)  # noqa: E731
            carve(sms)
            try:
                g_us = time_us(g)
                for tname in ("all-reduce 32 MiB", "all-gather 16 MiB shards"):
                    out(gain_line(f"fc1 with {sms} SMs carved out beside {tname}", g_us, alone_x[tname],
                                  time_us(together(g, transfers[tname]))))
            finally:
                carve(None)
    if handle is not None:
        try:
            wq = torch.randn(h, 3072, device=dev, dtype=bf)
            a_shard = torch.randn(n // world, h, device=dev, dtype=bf)
            gname = dist.group.WORLD.group_name
            symm_mem.enable_symm_mem_for_group(gname)

            def unfused():
                dist.all_gather_into_tensor(gathered, a_shard)
                return torch.matmul(gathered, wq)

            def fused():
                return torch.ops.symm_mem.fused_all_gather_matmul(a_shard, [wq], gather_dim=0, group_name=gname)
            ref = unfused()
            got = fused()[1][0]
            err = (ref.float() - got.float()).abs().max().item()
            out(f"overlap-probe qkv product of the gathered rows: all-gather then product {time_us(unfused):.1f} us, "
                f"PyTorch's fused all-gather matmul {time_us(fused):.1f} us (max difference {err:.3g})")
        except Exception as ex:  # noqa: BLE001
            out(f"overlap-probe: fused_all_gather_matmul failed ({type(ex).__name__}: {ex})")
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
