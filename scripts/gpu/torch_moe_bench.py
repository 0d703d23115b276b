# PyTorch reference for mcore4j's MoE benchmark rows (issue 34): the GPT of torch_dist_gpt_bench.py with every
# MLP replaced by a mixture of experts, in plain PyTorch the way a user writes it today: expert parallelism over
# every rank (each rank holds experts / world of them), tokens dispatched with the differentiable all-to-all of
# torch.distributed.nn, each rank's local experts run as two grouped GEMMs (torch._grouped_mm over the rows each
# expert received), non-expert parameters averaged over the ranks by DDP (the expert parameters are left out of
# it: expert-data-parallel size 1, as Megatron's EP = DP).
#   --experts E --topk K --moe-ffn F [--shared-ffn S] [--score softmax|sigmoid] [--expert-bias]
#   softmax: top-k of the softmax scores, renormalised over the chosen (Megatron's default with topk > 1 is no
#            renormalisation: --renorm off follows Megatron), Switch-style auxiliary loss --aux-coeff (1e-2)
#   --embedding-std S: word and position embeddings N(0, S^2) (Megatron's init 0.02; default nn.Embedding's 1.0,
#            under which the routers spread tokens evenly at initialisation and Megatron's do not)
#   --no-bias: no biases in the attention, output-projection and shared-expert linears (Megatron's
#            --disable-bias-linear, as Mixtral, Qwen3-MoE and DeepSeek-V3 have none; the routed experts never have one)
#   --force-balance: random normal router logits, gradient straight through (Megatron's benchmark-only
#            --moe-router-force-load-balancing), so that every expert receives about the same rows
#   sigmoid: top-k of sigmoid scores plus a per-expert bias used only for the choice (aux-loss-free balancing,
#            DeepSeek-V3), the chosen scores normalised to sum 1; no auxiliary loss
# Under torchrun, one process per GPU; prints one RESULT line from rank 0, with FLOPs counted as mcore4j's
# TransformerConfig.flopsPerToken does (Megatron's MoE accounting: top-k expert FFNs plus the shared expert).
import argparse, contextlib, os, time, torch, torch.nn as nn, torch.nn.functional as F
import torch.distributed as dist
from torch.distributed._functional_collectives import all_to_all_single_autograd

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=24); p.add_argument("--hidden", type=int, default=2048)
p.add_argument("--heads", type=int, default=16); p.add_argument("--seq", type=int, default=2048)
p.add_argument("--vocab", type=int, default=32768); p.add_argument("--mbs", type=int, default=4)
p.add_argument("--micro", type=int, default=2); p.add_argument("--steps", type=int, default=5)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--experts", type=int, default=8); p.add_argument("--topk", type=int, default=2)
p.add_argument("--moe-ffn", type=int, default=8192); p.add_argument("--shared-ffn", type=int, default=0)
p.add_argument("--score", choices=["softmax", "sigmoid"], default="softmax")
p.add_argument("--expert-bias", action="store_true")
p.add_argument("--aux-coeff", type=float, default=1e-2)
p.add_argument("--embedding-std", type=float, default=None,
               help="initialise the word and position embeddings N(0, std^2) (Megatron's init: 0.02; default:"
                    " nn.Embedding's N(0, 1)); at 0.02 the routers send most tokens of a layer to a few experts")
p.add_argument("--force-balance", action="store_true",
               help="route on random normal logits with the gradient passed straight through to the router's (as"
                    " Megatron's benchmark-only --moe-router-force-load-balancing)")
p.add_argument("--no-bias", action="store_true",
               help="no biases in the linears (Megatron's --disable-bias-linear); the routed experts have none anyway")
p.add_argument("--peak-tflops", type=float, default=989.0)
p.add_argument("--device", default="cuda")
p.add_argument("--check", action="store_true", help="compare one MoE layer with a token-by-token loop (one process) and exit")
a = p.parse_args()

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local = int(os.environ.get("LOCAL_RANK", 0))
cuda = a.device == "cuda"
if cuda:
    torch.cuda.set_device(local)
dist.init_process_group("nccl" if cuda else "gloo")
dev = torch.device("cuda", local) if cuda else torch.device("cpu")
assert a.experts % world == 0, f"--experts {a.experts} must be a multiple of the world size {world}"
E, K, EL = a.experts, a.topk, a.experts // world      # experts, chosen per token, experts on this rank
dtype = torch.bfloat16
bias = not a.no_bias                                   # the attention and shared-expert linears' biases


def grouped(x, w, offs):
    """x [rows, in] (rows grouped by local expert), w [EL, in, out], offs int32 cumulative row counts."""
    if cuda:
        return torch._grouped_mm(x, w, offs=offs)
    out, start = [], 0                                   # CPU: the same product expert by expert
    for e, end in enumerate(offs.tolist()):
        out.append(x[start:end] @ w[e]); start = end
    return torch.cat(out)


class Moe(nn.Module):
    def __init__(s, h):
        super().__init__()
        s.router = nn.Linear(h, E, bias=False)
        s.register_buffer("bias", torch.zeros(E))
        s.w1 = nn.Parameter(torch.randn(EL, h, a.moe_ffn) * 0.02)
        s.w2 = nn.Parameter(torch.randn(EL, a.moe_ffn, h) * 0.02)
        s.shared = nn.Sequential(nn.Linear(h, a.shared_ffn, bias=bias), nn.GELU(),
                                 nn.Linear(a.shared_ffn, h, bias=bias)) \
            if a.shared_ffn else None

    def forward(s, x):
        B, T, h = x.shape
        t = x.reshape(-1, h); n = t.shape[0]
        logits = s.router(t).float()
        if a.force_balance:
            logits = logits + (torch.randn_like(logits) - logits).detach()
        if a.score == "softmax":
            scores = logits.softmax(-1)
            probs, idx = scores.topk(K, dim=-1)
            frac = torch.zeros(E, device=t.device).scatter_add_(0, idx.reshape(-1), torch.ones(n * K, device=t.device))
            aux = a.aux_coeff * E * (frac / (n * K) * scores.mean(0)).sum()
        else:
            scores = logits.sigmoid()
            _, idx = (scores + s.bias).topk(K, dim=-1) if a.expert_bias else scores.topk(K, dim=-1)
            probs = scores.gather(1, idx); probs = probs / probs.sum(-1, keepdim=True)
            aux = torch.zeros((), device=t.device)
        # dispatch: assignments sorted by expert, so each destination rank's rows are contiguous
        flat = idx.reshape(-1)
        order = flat.argsort(stable=True)
        rows = t.index_select(0, order // K).to(dtype)
        counts = torch.bincount(flat, minlength=E)                          # rows for each expert, from this rank
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts)                         # [source rank, local expert]
        send_split = counts.view(world, EL).sum(1).tolist()
        recv_split = recv_counts.view(world, EL).sum(1).tolist()
        got = all_to_all_single_autograd(rows, recv_split, send_split, dist.group.WORLD)
        # regroup the received rows from (source rank, expert) order into expert order
        src_expert = torch.arange(world * EL, device=t.device) % EL
        seg = torch.repeat_interleave(torch.arange(world * EL, device=t.device), recv_counts)
        by_expert = (src_expert[seg] * (world * EL) + seg).argsort(stable=True)
        per_expert = recv_counts.view(world, EL).sum(0)
        offs = per_expert.cumsum(0).to(torch.int32)
        y = grouped(F.gelu(grouped(got.index_select(0, by_expert), s.w1.to(dtype), offs)), s.w2.to(dtype), offs)
        y = torch.empty_like(y).index_copy(0, by_expert, y)               # back to (source rank, expert) order
        back = all_to_all_single_autograd(y, send_split, recv_split, dist.group.WORLD)
        out = torch.empty_like(back).index_copy(0, order, back)            # back to (token, choice) order
        out = (out.view(n, K, h).float() * probs.unsqueeze(-1)).sum(1).to(x.dtype)
        if s.shared is not None:
            out = out + s.shared(t)
        return out.view(B, T, h), aux


class Block(nn.Module):
    def __init__(s, h, nh):
        super().__init__(); s.nh = nh; s.hd = h // nh
        s.ln1 = nn.LayerNorm(h); s.qkv = nn.Linear(h, 3 * h, bias=bias); s.proj = nn.Linear(h, h, bias=bias)
        s.ln2 = nn.LayerNorm(h); s.moe = Moe(h)

    def forward(s, x):
        B, T, _ = x.shape
        q, k, v = s.qkv(s.ln1(x)).view(B, T, s.nh, 3, s.hd).permute(3, 0, 2, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(y.transpose(1, 2).reshape(B, T, s.nh * s.hd))
        m, aux = s.moe(s.ln2(x))
        return x + m, aux


class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(a.vocab, a.hidden); s.pos = nn.Embedding(a.seq, a.hidden)
        s.blocks = nn.ModuleList(Block(a.hidden, a.heads) for _ in range(a.layers))
        s.lnf = nn.LayerNorm(a.hidden); s.out = nn.Linear(a.hidden, a.vocab, bias=False)

    def forward(s, idx):
        x = s.emb(idx) + s.pos(torch.arange(idx.shape[1], device=idx.device))
        aux = 0
        for b in s.blocks:
            x, l = b(x); aux = aux + l
        return s.out(s.lnf(x)), aux


if a.check:  # the dispatch, grouped GEMMs and combine against each token through its chosen experts
    assert world == 1, "--check runs on one process"
    torch.manual_seed(0); layer = Moe(a.hidden).to(dev); layer.bias.uniform_(-0.1, 0.1)
    x = torch.randn(2, 8, a.hidden, device=dev)
    with torch.no_grad():
        got, _ = layer(x)
        t = x.reshape(-1, a.hidden); logits = layer.router(t).float(); want = torch.zeros_like(t)
        for i in range(t.shape[0]):
            sc = logits[i].softmax(-1) if a.score == "softmax" else logits[i].sigmoid()
            _, ch = (sc + layer.bias).topk(K) if a.score == "sigmoid" and a.expert_bias else sc.topk(K)
            pr = sc[ch] if a.score == "softmax" else sc[ch] / sc[ch].sum()
            for e, w in zip(ch.tolist(), pr.tolist()):
                xe = t[i].to(dtype)
                want[i] += w * (F.gelu(xe @ layer.w1[e].to(dtype)) @ layer.w2[e].to(dtype)).float()
            if layer.shared is not None: want[i] += layer.shared(t[i:i + 1])[0]
    err = (got.reshape(-1, a.hidden) - want).abs().max().item()
    print(f"CHECK max|moe - loop| = {err:.3e} (scale {want.abs().max().item():.3e})")
    raise SystemExit(0 if err <= 2e-2 * max(1.0, want.abs().max().item()) else 1)
torch.manual_seed(0)
m = GPT().to(dev)
if a.embedding_std is not None:
    nn.init.normal_(m.emb.weight, std=a.embedding_std); nn.init.normal_(m.pos.weight, std=a.embedding_std)
torch.manual_seed(100 + rank)                          # each rank's experts are different experts
for b in m.blocks:
    nn.init.normal_(b.moe.w1, std=0.02); nn.init.normal_(b.moe.w2, std=0.02)
expert_names = [name for name, _ in m.named_parameters() if name.endswith((".w1", ".w2"))]
from torch.nn.parallel import DistributedDataParallel as DDP
DDP._set_params_and_buffers_to_ignore_for_model(m, expert_names + [n for n, _ in m.named_buffers() if n.endswith("bias")])
model = DDP(m, device_ids=[local] if cuda else None, gradient_as_bucket_view=True)
opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=cuda)
g = torch.Generator(device=dev).manual_seed(1234 + rank)
tok = torch.randint(0, a.vocab, (a.mbs, a.seq + 1), device=dev, generator=g)


def step():
    opt.zero_grad(set_to_none=True)
    for i in range(a.micro):
        ctx = model.no_sync() if i < a.micro - 1 else contextlib.nullcontext()
        with ctx:
            with torch.autocast(a.device, dtype=dtype):
                logits, aux = model(tok[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, a.vocab), tok[:, 1:].reshape(-1)) / a.micro
            (loss + aux / a.micro).backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)   # local norm: the reference keeps one collective less
    opt.step()
    return loss


for _ in range(a.warmup):
    l = step()
if cuda: torch.cuda.synchronize()
dist.barrier(); t0 = time.time()
for _ in range(a.steps):
    l = step()
if cuda: torch.cuda.synchronize()
dt = (time.time() - t0) / a.steps
L, h, s, V = a.layers, a.hidden, a.seq, a.vocab
fpt = L * (24 * h * h + 12 * h * s) + 6 * h * 2 * (a.moe_ffn * K + a.shared_ffn) * L + 6 * h * V
tps = a.mbs * a.micro * s / dt                          # tokens/s per GPU (every rank is a data-parallel replica)
if rank == 0:
    mem = ""
    if cuda:
        free, total = torch.cuda.mem_get_info()
        mem = (f"peakmem={torch.cuda.max_memory_allocated() / 2**30:.1f}GiB (allocated) "
               f"device={(total - free) / 2**30:.1f}GiB (in use)")
    name = f"torch-moe-ep{world}{'-fb' if a.force_balance else ''}-bf16"
    print(f"RESULT {name} world={world} experts={E} topk={K} moe_ffn={a.moe_ffn} "
          f"shared={a.shared_ffn} score={a.score} bias={'on' if bias else 'off'} balance={'forced' if a.force_balance else 'router'} "
          f"embedding_std={a.embedding_std if a.embedding_std is not None else 1.0} "
          f"L={L} h={h} s={s} V={V} mbs={a.mbs} micro={a.micro} "
          f"step={dt * 1000:.1f}ms tokens/s/gpu={tps:.0f} MFU={fpt * tps / 1e12 / a.peak_tflops * 100:.1f}% "
          f"loss={l.item() * a.micro:.3f} {mem}", flush=True)
dist.destroy_process_group()
