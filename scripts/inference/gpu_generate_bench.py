"""The Python half of mcore4j's generation benchmark (run through gpu_generate_bench.sh).

  make DIR     builds a LLaMA-shaped model (about 1.1B parameters: 16 layers, hidden 2048, 32 heads,
               8 key/value groups, SwiGLU 8192, vocab 32000, RMSNorm, RoPE, untied) from a fixed seed,
               writes it as a Hugging Face directory (DIR/hf), the same weights in mcore4j's parameter
               keys and fused layouts (DIR/mcore4j.safetensors), and 16 prompts of 32 random ids
               (DIR/prompts.json), all in float16.
  hf DIR       (HF_COMPILE=1: with a static cache and torch.compile, ids to DIR/hf_compiled_tokens.json)
               times transformers' generate() (greedy, 256 new tokens, no early stop) on DIR/hf at
               batch 1 and 16 on the GPU (CPU if there is none), after an untimed warm-up, and writes its ids (DIR/hf_tokens.json).
  compare DIR  counts how many leading generated ids of every request mcore4j and transformers share.

mcore4j's layout: linear_qkv stacks, per key/value group, that group's query heads, then its key head,
then its value head; linear_fc1 is [gate; up]; norms and the output layer keep their weights. Both
implementations rotate the two halves of each head ("rotate half"), so no permutation is needed.
"""
import json
import os
import sys
import time

import torch

LAYERS, HIDDEN, HEADS, GROUPS, FFN, VOCAB = 16, 2048, 32, 8, 8192, 32000
PROMPTS, PROMPT_LENGTH, NEW_TOKENS, SEED = 16, 32, 256, 1234
DTYPE = torch.float16
# BENCH_TINY=1: a 2-layer float32 model of the same kind, to check the conversion on a CPU host
# (GenerateBenchmark --num-layers 2 --hidden-size 64 --num-attention-heads 4 --num-query-groups 2
#  --ffn-hidden-size 128 --vocab-size 256 --fp32); the ids must then agree in full
if os.environ.get("BENCH_TINY") == "1":
    LAYERS, HIDDEN, HEADS, GROUPS, FFN, VOCAB = 2, 64, 4, 2, 128, 256
    PROMPTS, PROMPT_LENGTH, NEW_TOKENS, DTYPE = 4, 8, 24, torch.float32
ROPE_THETA = 10000.0
# BENCH_SHAPE=8b: Llama-3-8B's shape (32 layers, hidden 4096, 32 heads, 8 key/value groups, SwiGLU 14336, vocab
# 128256, RoPE base 500000), issue 41's 8B row (GenerateBenchmark --num-layers 32 --hidden-size 4096
#  --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 14336 --vocab-size 128256 --rotary-base 500000)
if os.environ.get("BENCH_SHAPE") == "8b":
    LAYERS, HIDDEN, HEADS, GROUPS, FFN, VOCAB, ROPE_THETA = 32, 4096, 32, 8, 14336, 128256, 500000.0
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def llama_config():
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                       num_attention_heads=HEADS, num_key_value_heads=GROUPS, max_position_embeddings=2048,
                       rms_norm_eps=1e-5, rope_theta=ROPE_THETA, tie_word_embeddings=False, attention_bias=False,
                       mlp_bias=False, initializer_range=0.02)


def to_mcore4j(state):
    d = HIDDEN // HEADS
    per = HEADS // GROUPS
    out = {
        "embedding.word_embeddings.weight": state["model.embed_tokens.weight"],
        "decoder.final_layernorm.weight": state["model.norm.weight"],
        "output_layer.weight": state["lm_head.weight"],
    }
    for i in range(LAYERS):
        hf = f"model.layers.{i}."
        ours = f"decoder.layers.{i}."
        q = state[hf + "self_attn.q_proj.weight"].view(GROUPS, per * d, HIDDEN)
        k = state[hf + "self_attn.k_proj.weight"].view(GROUPS, d, HIDDEN)
        v = state[hf + "self_attn.v_proj.weight"].view(GROUPS, d, HIDDEN)
        out[ours + "self_attention.linear_qkv.weight"] = torch.cat([q, k, v], dim=1).reshape(-1, HIDDEN)
        out[ours + "self_attention.linear_proj.weight"] = state[hf + "self_attn.o_proj.weight"]
        out[ours + "input_layernorm.weight"] = state[hf + "input_layernorm.weight"]
        out[ours + "pre_mlp_layernorm.weight"] = state[hf + "post_attention_layernorm.weight"]
        out[ours + "mlp.linear_fc1.weight"] = torch.cat([state[hf + "mlp.gate_proj.weight"],
                                                         state[hf + "mlp.up_proj.weight"]], dim=0)
        out[ours + "mlp.linear_fc2.weight"] = state[hf + "mlp.down_proj.weight"]
    return {k: v.contiguous() for k, v in out.items()}


def make(work):
    from safetensors.torch import save_file
    from transformers import LlamaForCausalLM
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(SEED)
    with torch.device(DEVICE):  # initialised where it runs: an 8B model's CPU initialisation takes minutes
        model = LlamaForCausalLM(llama_config()).to(DTYPE)
    model.save_pretrained(os.path.join(work, "hf"))
    save_file(to_mcore4j(model.state_dict()), os.path.join(work, "mcore4j.safetensors"))
    prompts = torch.randint(0, VOCAB, (PROMPTS, PROMPT_LENGTH), generator=torch.Generator().manual_seed(SEED))
    with open(os.path.join(work, "prompts.json"), "w") as f:
        json.dump(prompts.tolist(), f)
    params = sum(p.numel() for p in model.parameters())
    print(f"made {params / 1e9:.2f}B parameters (seed {SEED}) in {work}")


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def hf(work):
    from transformers import LlamaForCausalLM
    try:
        model = LlamaForCausalLM.from_pretrained(os.path.join(work, "hf"), dtype=DTYPE)
    except TypeError:
        model = LlamaForCausalLM.from_pretrained(os.path.join(work, "hf"), torch_dtype=DTYPE)
    model = model.to(DEVICE).eval()
    # HF_COMPILE=1: the compiled reference, static cache + torch.compile (default mode), warmed up at the timed
    # length (the static cache's shapes follow it) so that compilation stays outside the clock
    compiled = os.environ.get("HF_COMPILE") == "1"
    if compiled:
        model.generation_config.cache_implementation = "static"
        model.forward = torch.compile(model.forward)
    label = "transformers static+compile" if compiled else "transformers generate"
    # no end-of-sequence token on either side: both generate exactly NEW_TOKENS and nothing is suppressed
    model.generation_config.eos_token_id = None
    model.config.eos_token_id = None
    with open(os.path.join(work, "prompts.json")) as f:
        prompts = torch.tensor(json.load(f), dtype=torch.long)
    generated = {}
    for b in (1, PROMPTS):
        ids = prompts[:b].to(DEVICE)
        mask = torch.ones_like(ids)
        kwargs = dict(attention_mask=mask, do_sample=False, pad_token_id=0)
        with torch.inference_mode():
            for _ in range(2 if compiled else 1):
                model.generate(ids, max_new_tokens=NEW_TOKENS if compiled else 16, **kwargs)
            sync()
            start = time.perf_counter()
            out = model.generate(ids, max_new_tokens=NEW_TOKENS, **kwargs)
            sync()
            seconds = time.perf_counter() - start
        new = out[:, PROMPT_LENGTH:]
        assert new.shape[1] == NEW_TOKENS, f"transformers stopped after {new.shape[1]} tokens"
        generated[str(b)] = new.tolist()
        print(f"{label}: batch {b}, prompt {PROMPT_LENGTH}, {NEW_TOKENS} new tokens: "
              f"{new.numel() / seconds:.1f} tokens/s ({1000 * seconds / NEW_TOKENS:.2f} ms per step, {seconds:.2f} s)"
              f" [torch {torch.__version__}, attention {model.config._attn_implementation}]")
    with open(os.path.join(work, "hf_compiled_tokens.json" if compiled else "hf_tokens.json"), "w") as f:
        json.dump(generated, f)


def compare(work):
    with open(os.path.join(work, "hf_tokens.json")) as f:
        theirs = json.load(f)
    with open(os.path.join(work, "mcore4j_tokens.json")) as f:
        ours = json.load(f)
    for b in sorted(theirs, key=int):
        shared = []
        for a, c in zip(ours[b], theirs[b]):
            n = 0
            while n < min(len(a), len(c)) and a[n] == c[n]:
                n += 1
            shared.append(n)
        print(f"batch {b}: leading generated ids shared with transformers per request: {shared}"
              f" (float16: the two drift apart once a near-tie flips)")


if __name__ == "__main__":
    {"make": make, "hf": hf, "compare": compare}[sys.argv[1]](sys.argv[2])
