# Reference point for mcore4j's GPU benchmark: the same GPT written in plain PyTorch eager, the way
# most users would (autocast fp16 over fp32 parameters with GradScaler, or autocast bf16 without one;
# fused AdamW, clip 1.0, attention through F.scaled_dot_product_attention). Run it in the same call as
# mcore4j's benchmark and report the ratio of tokens/s: absolute figures drift between machines, a
# ratio from one run does not.
#   python3 eager_gpt_bench.py [--unfused] [--compile] [--bf16] [--layers 24 --hidden 2048 --heads 16 --seq 2048 ...]
# Prints one RESULT line: step time, tokens/s per GPU, TFLOP/s (Megatron's FLOPs per token
# 72*L*h^2 + 12*L*h*s + 6*h*V), MFU against --peak-tflops, PyTorch's peak allocated memory and the
# device memory in use as the driver reports it (CUDA context and caching allocator included, the
# figure mcore4j's benchmark prints).
import argparse, time, torch, torch.nn as nn, torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=24); p.add_argument("--hidden", type=int, default=2048)
p.add_argument("--heads", type=int, default=16); p.add_argument("--seq", type=int, default=2048)
p.add_argument("--vocab", type=int, default=32768); p.add_argument("--mbs", type=int, default=4)
p.add_argument("--micro", type=int, default=2); p.add_argument("--steps", type=int, default=10)
p.add_argument("--warmup", type=int, default=3)
p.add_argument("--unfused", action="store_true", help="attention from matmul + softmax instead of SDPA")
p.add_argument("--compile", action="store_true", help="torch.compile the model (compilation takes minutes)")
p.add_argument("--bf16", action="store_true", help="autocast to bfloat16 (no loss scaling) instead of float16")
p.add_argument("--peak-tflops", type=float, default=989.0, help="the device's dense fp16/bf16 peak (H100/H200 SXM: 989)")
a = p.parse_args()
dtype = torch.bfloat16 if a.bf16 else torch.float16


class Block(nn.Module):
    def __init__(s, h, nh):
        super().__init__(); s.nh = nh
        s.ln1 = nn.LayerNorm(h); s.qkv = nn.Linear(h, 3 * h); s.proj = nn.Linear(h, h)
        s.ln2 = nn.LayerNorm(h); s.fc1 = nn.Linear(h, 4 * h); s.fc2 = nn.Linear(4 * h, h)

    def forward(s, x):
        B, T, H = x.shape
        q, k, v = s.qkv(s.ln1(x)).view(B, T, 3, s.nh, H // s.nh).permute(2, 0, 3, 1, 4)
        if a.unfused:
            att = (q @ k.transpose(-1, -2)) / (H // s.nh) ** 0.5
            att = att.masked_fill(torch.ones(T, T, device=x.device, dtype=torch.bool).triu(1), float("-inf"))
            y = att.softmax(-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(y.transpose(1, 2).reshape(B, T, H))
        return x + s.fc2(F.gelu(s.fc1(s.ln2(x))))


class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(a.vocab, a.hidden); s.pos = nn.Embedding(a.seq, a.hidden)
        s.blocks = nn.ModuleList(Block(a.hidden, a.heads) for _ in range(a.layers))
        s.lnf = nn.LayerNorm(a.hidden); s.out = nn.Linear(a.hidden, a.vocab, bias=False)

    def forward(s, idx):
        x = s.emb(idx) + s.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in s.blocks:
            x = b(x)
        return s.out(s.lnf(x))


m = GPT().cuda(); fwd = torch.compile(m) if a.compile else m
opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
scaler = torch.amp.GradScaler(enabled=not a.bf16)
tok = torch.randint(0, a.vocab, (a.mbs, a.seq + 1), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    for _ in range(a.micro):
        with torch.autocast("cuda", dtype=dtype):
            loss = F.cross_entropy(fwd(tok[:, :-1]).float().view(-1, a.vocab), tok[:, 1:].reshape(-1)) / a.micro
        scaler.scale(loss).backward()
    scaler.unscale_(opt); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    scaler.step(opt); scaler.update()


for _ in range(a.warmup):
    step()
torch.cuda.synchronize(); t0 = time.time()
for _ in range(a.steps):
    step()
torch.cuda.synchronize(); dt = (time.time() - t0) / a.steps
L, h, s, V = a.layers, a.hidden, a.seq, a.vocab
fpt = 72 * L * h * h + 12 * L * h * s + 6 * h * V
tps = a.mbs * a.micro * s / dt
free, total = torch.cuda.mem_get_info()
name = f"eager-{'unfused' if a.unfused else 'sdpa'}{'-compile' if a.compile else ''}-{'bf16' if a.bf16 else 'fp16'}"
print(f"RESULT {name} L={L} h={h} s={s} V={V} mbs={a.mbs} micro={a.micro} step={dt * 1000:.1f}ms "
      f"tokens/s/gpu={tps:.0f} TFLOP/s/gpu={fpt * tps / 1e12:.1f} MFU={fpt * tps / 1e12 / a.peak_tflops * 100:.1f}% "
      f"peakmem={torch.cuda.max_memory_allocated() / 2**30:.1f}GiB (allocated) "
      f"device={(total - free) / 2**30:.1f}GiB (in use, of {total / 2**30:.1f})", flush=True)
