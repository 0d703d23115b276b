# The eager PyTorch reference for mcore4j's --bf16 benchmark: the 1.3B GPT of GptBenchmark written in
# plain PyTorch as most users would train it in bf16: torch.autocast(bfloat16) over float32
# parameters (which keeps fp32 master weights and optimizer state, as mcore4j's --bf16 does), no loss
# scaling, fused AdamW, clipping at 1.0, attention through F.scaled_dot_product_attention.
# Prints one RESULT line in the format of ../shared/gpu/eager_gpt_bench.py, for the same call.
#   python3 scripts/gpu/eager_bf16_gpt_bench.py [--layers 24 --hidden 2048 --heads 16 --seq 2048 ...]
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

args = argparse.ArgumentParser()
for name, default in [("layers", 24), ("hidden", 2048), ("heads", 16), ("seq", 2048), ("vocab", 32768),
                      ("mbs", 4), ("micro", 2), ("steps", 10), ("warmup", 3)]:
    args.add_argument("--" + name, type=int, default=default)
a = args.parse_args()


class Layer(nn.Module):
    def __init__(self, h: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        context = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(context)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Gpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(a.vocab, a.hidden), nn.Embedding(a.seq, a.hidden)
        self.layers = nn.ModuleList(Layer(a.hidden, a.heads) for _ in range(a.layers))
        self.final_norm = nn.LayerNorm(a.hidden)
        self.output = nn.Linear(a.hidden, a.vocab, bias=False)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
        for layer in self.layers:
            x = layer(x)
        return self.output(self.final_norm(x))


model = Gpt().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
ids = torch.randint(0, a.vocab, (a.mbs, a.seq + 1), device="cuda")


def train_step():
    optimizer.zero_grad(set_to_none=True)
    for _ in range(a.micro):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), ids[:, 1:].reshape(-1)) / a.micro
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


for _ in range(a.warmup):
    train_step()
torch.cuda.synchronize()
start = time.time()
for _ in range(a.steps):
    train_step()
torch.cuda.synchronize()
seconds = (time.time() - start) / a.steps
L, h, s, V = a.layers, a.hidden, a.seq, a.vocab
flops_per_token = 72 * L * h * h + 12 * L * h * s + 6 * h * V
tokens_per_second = a.mbs * a.micro * s / seconds
print(f"RESULT eager-sdpa-bf16-autocast L={L} h={h} s={s} V={V} mbs={a.mbs} micro={a.micro} step={seconds * 1000:.1f}ms "
      f"tokens/s/gpu={tokens_per_second:.0f} TFLOP/s/gpu={flops_per_token * tokens_per_second / 1e12:.1f} "
      f"MFU={flops_per_token * tokens_per_second / 1e12 / 989 * 100:.1f}% "
      f"peakmem={torch.cuda.max_memory_allocated() / 2**30:.1f}GiB", flush=True)
