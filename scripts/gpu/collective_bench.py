#!/usr/bin/env python3
"""collective_bench.py: PyTorch's twin of io.mcore4j.samples.bench.CollectiveBenchmark (issue 32).

Under torchrun (one process per GPU, torch.distributed's NCCL backend on cuda:LOCAL_RANK): for each operation and
message size, --warmup untimed calls, torch.cuda.synchronize() and a barrier, then --iterations back-to-back calls on
the world group timed by time.perf_counter() up to a torch.cuda.synchronize(); rank 0 prints one line per operation
and size in the Java benchmark's format, with `collective-benchmark-torch` as its first word:

  collective-benchmark-torch op=all_reduce size=32.0MiB dtype=bf16 ranks=2 | time 123.4 us | algbw 272.0 GB/s | busbw 272.0 GB/s

size: bytes of the full tensor (the all-reduce's tensor, the reduce-scatter's input, the all-gather's output), rounded
down to a whole number of elements per rank; algbw = size / time (GB = 1e9 bytes); busbw as nccl-tests: algbw x
2(n-1)/n for the all-reduces, algbw x (n-1)/n for reduce_scatter and all_gather. Calls: all_reduce in place (SUM),
reduce_scatter_tensor and all_gather_into_tensor into an output allocated per call (as the Java communicator does),
and, only when named, all_reduce_out: the functional (out-of-place) all-reduce that DTensor tensor parallelism makes,
_c10d_functional.all_reduce and wait_tensor, beside the Java side's out-of-place Communicator.allReduce.

  NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc_per_node=2 scripts/gpu/collective_bench.py --sizes-mib 1,32
  python3 collective_bench.py --selftest    (the arithmetic and the line format; no GPU, no torch needed)
"""
import argparse
import os
import sys
import time

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_reduce_out")
DEFAULT_OPS = "all_reduce,reduce_scatter,all_gather"
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def bus_bandwidth(op, algbw, ranks):
    """nccl-tests' bus bandwidth of `op` over `ranks` ranks from the algorithm bandwidth."""
    if ranks < 1:
        raise ValueError(f"ranks {ranks} must be at least 1")
    factor = (ranks - 1) / ranks
    return algbw * (2 * factor if op in ("all_reduce", "all_reduce_out") else factor)


def elements(mib, dtype, ranks):
    """Elements of a full tensor of `mib` MiB, rounded down to a multiple of `ranks`."""
    total = int(mib * (1 << 20)) // DTYPE_BYTES[dtype]
    per_rank = total // ranks
    if per_rank < 1:
        raise ValueError(f"--sizes-mib {mib} holds {total} {dtype} elements, fewer than one for each of {ranks} ranks")
    return per_rank * ranks


def line(prefix, op, nbytes, dtype, ranks, seconds):
    algbw = nbytes / seconds
    return (f"{prefix} op={op} size={nbytes / (1 << 20):.1f}MiB dtype={dtype} ranks={ranks} | time {seconds * 1e6:.1f} us"
            f" | algbw {algbw / 1e9:.1f} GB/s | busbw {bus_bandwidth(op, algbw, ranks) / 1e9:.1f} GB/s")


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes-mib", default="1,4,16,32,64", help="message sizes in MiB (the full tensor)")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPE_BYTES))
    p.add_argument("--iterations", type=int, default=50, help="timed calls per operation and size")
    p.add_argument("--warmup", type=int, default=2000, help="untimed calls before them (as CollectiveBenchmark's)")
    p.add_argument("--ops", default=DEFAULT_OPS, help="operations, of " + ", ".join(OPS) + " (default: %(default)s)")
    p.add_argument("--selftest", action="store_true", help="check the arithmetic and the line format, then exit")
    args = p.parse_args(argv)
    try:
        args.sizes = [float(s) for s in args.sizes_mib.split(",")]
    except ValueError:
        p.error(f"--sizes-mib {args.sizes_mib}: expected comma-separated numbers of MiB")
    args.op_list = args.ops.split(",")
    for op in args.op_list:
        if op not in OPS:
            p.error(f"--ops {op} is not one of {', '.join(OPS)}")
    if any(not s > 0 for s in args.sizes):
        p.error(f"--sizes-mib {args.sizes_mib}: every size must be above 0")
    if args.iterations < 1 or args.warmup < 0:
        p.error(f"--iterations {args.iterations} must be at least 1, --warmup {args.warmup} at least 0")
    return args


def selftest():
    expect = [
        (line("collective-benchmark-torch", "all_reduce", 32 << 20, "bf16", 2, (32 << 20) / 272e9),
         "collective-benchmark-torch op=all_reduce size=32.0MiB dtype=bf16 ranks=2 | time 123.4 us"
         " | algbw 272.0 GB/s | busbw 272.0 GB/s"),
        (line("x", "all_gather", 1 << 20, "fp32", 4, 10e-6),
         "x op=all_gather size=1.0MiB dtype=fp32 ranks=4 | time 10.0 us | algbw 104.9 GB/s | busbw 78.6 GB/s"),
        (bus_bandwidth("all_reduce", 100, 4), 150.0),
        (bus_bandwidth("reduce_scatter", 100, 2), 50.0),
        (bus_bandwidth("all_reduce_out", 100, 8), 175.0),
        (elements(32, "bf16", 2), 16 << 20),
        (elements(1, "fp16", 3), 3 * 174762),
    ]
    bad = [(got, want) for got, want in expect if got != want]
    for got, want in bad:
        print(f"selftest: FAIL got {got!r}, expected {want!r}")
    print("selftest: PASS" if not bad else "selftest: FAIL")
    return 0 if not bad else 1


def main(argv):
    args = parse(argv)
    if args.selftest:
        return selftest()
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)
    rank, n = dist.get_rank(), dist.get_world_size()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]

    group_name = dist.group.WORLD.group_name
    functional = torch.ops._c10d_functional

    def call(op, full, piece):
        if op == "all_reduce":
            dist.all_reduce(full)
        elif op == "all_reduce_out":
            functional.wait_tensor(functional.all_reduce(full, "sum", group_name))
        elif op == "reduce_scatter":
            dist.reduce_scatter_tensor(torch.empty_like(piece), full)
        else:
            dist.all_gather_into_tensor(torch.empty_like(full), piece)

    for op in args.op_list:
        for mib in args.sizes:
            count = elements(mib, args.dtype, n)
            # zeros: sums of zeros stay finite however many times the all-reduce runs in place
            full = torch.zeros(count, dtype=dtype, device=device)
            piece = torch.zeros(count // n, dtype=dtype, device=device)
            for _ in range(args.warmup):
                call(op, full, piece)
            torch.cuda.synchronize()
            dist.barrier()  # the ranks start the timed calls together
            start = time.perf_counter()
            for _ in range(args.iterations):
                call(op, full, piece)
            torch.cuda.synchronize()
            seconds = (time.perf_counter() - start) / args.iterations
            if rank == 0:
                print(line("collective-benchmark-torch", op, count * DTYPE_BYTES[args.dtype], args.dtype, n, seconds),
                      flush=True)
            del full, piece
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
