"""The Hugging Face reference for mcore4j's LoRA fine-tuning benchmark (issue 37): transformers + peft on
one GPU, on the same conversations and the same model shape as `scripts/gpu/finetune-check.sh` gives
mcore4j.

  python3 peft_finetune_bench.py --model DIR --data chats.jsonl --tokenizer TOKDIR [--make-model]

--make-model first writes a LLaMA of the given shape with random bf16 weights (made by transformers,
seeded) to DIR as safetensors, which mcore4j then loads with --load-hf DIR; without it DIR must exist.
The conversations (JSON Lines of {"messages": [{role, content}]}) are rendered with the tokenizer's chat
template, truncated to --seq-length, and trained on in file order:
  padded: micro-batches of --micro-batch-size conversations, each padded to its longest one;
  packed: (only where flash-attn is installed) conversations concatenated into rows of --seq-length with
          position ids that restart per conversation, transformers' padding-free path on flash_attention_2.
Loss on the assistant turns only (the tokens a conversation's render adds after each assistant turn's
prefix). LoRA (peft) on q, k, v, o, gate, up and down projections; SDPA attention; bf16 weights; fused
AdamW. Prints one RESULT line per mode: tokens/s counts the conversations' own tokens (no padding), and
the peak memory PyTorch's allocator saw.
"""
import argparse
import json
import os
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--model", required=True)
p.add_argument("--make-model", action="store_true")
p.add_argument("--data", required=True)
p.add_argument("--tokenizer", required=True)
p.add_argument("--layers", type=int, default=32)
p.add_argument("--hidden", type=int, default=4096)
p.add_argument("--ffn", type=int, default=14336)
p.add_argument("--heads", type=int, default=32)
p.add_argument("--kv-heads", type=int, default=8)
p.add_argument("--vocab", type=int, default=128256)
p.add_argument("--seq-length", type=int, default=4096)
p.add_argument("--micro-batch-size", type=int, default=4)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--lora-rank", type=int, default=16)
p.add_argument("--lora-alpha", type=float, default=32)
p.add_argument("--modes", default="padded,packed")
a = p.parse_args()

from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: E402

dev = torch.device("cuda")
if a.make_model:
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=8192,
                      rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="bfloat16")
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device(dev):
        m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    m.save_pretrained(a.model, safe_serialization=True)
    del m
    torch.cuda.empty_cache()
    print(f"made {a.model}: {a.layers} layers, hidden {a.hidden}, random bf16 weights, {time.time() - t0:.0f} s",
          flush=True)

tok = AutoTokenizer.from_pretrained(a.tokenizer)


def chat_ids(messages, **kwargs):
    """apply_chat_template's token ids (transformers 5 returns a BatchEncoding, 4 a list)."""
    ids = tok.apply_chat_template(messages, tokenize=True, **kwargs)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def render(messages):
    """Token ids of the conversation and its loss mask: 1 on what each assistant turn adds."""
    ids = chat_ids(messages)
    mask = [0] * len(ids)
    for i, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        before = chat_ids(messages[:i], add_generation_prompt=True)
        upto = chat_ids(messages[:i + 1])
        for j in range(len(before), min(len(upto), len(ids))):
            mask[j] = 1
    return ids[:a.seq_length + 1], mask[:a.seq_length + 1]


with open(a.data) as f:
    convs = [render(json.loads(line)["messages"]) for line in f if line.strip()]
print(f"{len(convs)} conversations, {sum(len(c[0]) for c in convs)} tokens, lengths "
      f"{min(len(c[0]) for c in convs)}..{max(len(c[0]) for c in convs)}", flush=True)


def padded_batches():
    i = 0
    while True:
        group = [convs[(i + j) % len(convs)] for j in range(a.micro_batch_size)]
        i += a.micro_batch_size
        n = max(len(ids) for ids, _ in group) - 1
        x = torch.full((len(group), n), tok.pad_token_id or 0, dtype=torch.long)
        y = torch.full((len(group), n), -100, dtype=torch.long)
        att = torch.zeros((len(group), n), dtype=torch.long)
        real = 0
        for r, (ids, mask) in enumerate(group):
            t = torch.tensor(ids)
            k = len(ids) - 1
            x[r, :k] = t[:-1]
            lab = t[1:].clone()
            lab[torch.tensor(mask[1:]) == 0] = -100
            y[r, :k] = lab
            att[r, :k] = 1
            real += k
        yield dict(input_ids=x.to(dev), labels=y.to(dev), attention_mask=att.to(dev)), real


def packed_batches():
    i = 0
    while True:
        xs, ys, ps, real = [], [], [], 0
        while True:
            ids, mask = convs[i % len(convs)]
            k = len(ids) - 1
            if real + k > a.seq_length * a.micro_batch_size and xs:
                break
            i += 1
            t = torch.tensor(ids)
            lab = t[1:].clone()
            lab[torch.tensor(mask[1:]) == 0] = -100
            lab[0] = -100  # transformers' padding-free convention: no loss across a sequence start
            xs.append(t[:-1]); ys.append(lab); ps.append(torch.arange(k)); real += k
        yield dict(input_ids=torch.cat(xs)[None].to(dev), labels=torch.cat(ys)[None].to(dev),
                   position_ids=torch.cat(ps)[None].to(dev)), real


def run(mode):
    from peft import LoraConfig, get_peft_model
    attn = "flash_attention_2" if mode == "packed" else "sdpa"
    m = LlamaForCausalLM.from_pretrained(a.model, torch_dtype=torch.bfloat16, attn_implementation=attn).to(dev)
    m = get_peft_model(m, LoraConfig(r=a.lora_rank, lora_alpha=a.lora_alpha, lora_dropout=0.0,
                                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                     "down_proj"]))
    opt = torch.optim.AdamW([q for q in m.parameters() if q.requires_grad], lr=1e-4, fused=True)
    batches = padded_batches() if mode == "padded" else packed_batches()
    torch.cuda.reset_peak_memory_stats()
    tokens, t0, loss = 0, None, None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            torch.cuda.synchronize(); t0 = time.time(); tokens = 0
        batch, real = next(batches)
        loss = m(**batch).loss
        loss.backward()
        opt.step(); opt.zero_grad(set_to_none=True)
        tokens += real
    torch.cuda.synchronize()
    dt = time.time() - t0
    print(f"RESULT peft-lora-{mode} layers={a.layers} hidden={a.hidden} seq<={a.seq_length} mbs={a.micro_batch_size} "
          f"steps={a.steps} tokens/s={tokens / dt:.0f} step={dt / a.steps * 1000:.1f}ms loss={loss.item():.3f} "
          f"peakmem={torch.cuda.max_memory_allocated() / 2**30:.1f}GiB", flush=True)
    del m, opt
    torch.cuda.empty_cache()


for mode in a.modes.split(","):
    if mode == "packed":
        try:
            import flash_attn  # noqa: F401
        except ImportError:
            print("RESULT peft-lora-packed skipped: flash-attn is not installed, and transformers' padding-free path"
                  " needs flash_attention_2", flush=True)
            continue
    try:
        run(mode)
    except torch.OutOfMemoryError as e:
        print(f"RESULT peft-lora-{mode} failed: CUDA out of memory ({str(e).splitlines()[0][:120]})", flush=True)
        torch.cuda.empty_cache()
