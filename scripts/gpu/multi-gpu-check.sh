#!/usr/bin/env bash
# multi-gpu-check.sh: on a 2- or 4-GPU host, after `source .gpu/run-on-host.sh` (see docs/gpu.md; CP holds
# mcore4j's jars), runs in one call every row of issue 32's table with the PyTorch references beside them, and
# ends with a markdown table of tokens/s per GPU and MFU (docs/benchmarks.md, "Regenerating the multi-GPU table").
#   multi-gpu-check.sh               run the rows (ROWS, default: every row that fits the host's GPUs)
#   multi-gpu-check.sh --table FILE  the table again from this script's saved output (stdout of an earlier call)
#   multi-gpu-check.sh --selftest    checks the parsing and the table on fake lines, and a dry run of the whole
#                                    script with fake java, torchrun, python3 and nvidia-smi (no GPU, no Java)
# Rows (GPUs): tp1 (1), tp2 (2), tp4 (4), pp2 (2), pp2-vp (2: PP2 interleaved, Megatron's
#   --num-layers-per-virtual-pipeline-stage 2, six model chunks per rank), tp2pp2 (4), tp2pp2-vp (4: the same
#   interleaving), tp2dp2 (4), dp2 (2), dp4 (4),
#   llama-tp4sp (4), llama-tp2dp2 (4), probe-tp1 (1), probe-tp2 (2), probe-tp4 (4); and, only when named,
#   tp2sp (2), tp2sp-overlap (2: with --tp-comm-overlap), tp4sp-overlap (4), pp2-m8 and tp2pp2-m8 (2, 4: pp2 and
#   tp2pp2 with the same 8 sequences as 8 micro-batches of 1), llama-tp4sp-overlap (4), llama-dp4 (4), dp4-zero2 (4: dp4 with --use-megatron-fsdp --data-parallel-sharding-strategy
#   optim_grads), dp4-zero3 (4: the same with optim_grads_params, no layer recomputed: the weights are freed in place
#   by mcore4j's native library), dp4-zero3-recompute (4: ZeRO-3 with every layer recomputed, as without that
#   library; "fsdp" names dp4 dp4-zero2 dp4-zero3, issue 36's rows), llama20b-zero3 (4 H200s: issue 36's ~20B LLaMA
#   shape, 48 layers, hidden 6144, FFN 16384, 48 heads, 8 query groups, sequence 4096, DP4 ZeRO-3 averaged in the
#   collective (--ddp-average-in-collective, as FSDP2 averages), reduced in bf16 (--grad-reduce-in-bf16: in fp32 the
#   row needs about 18 layers recomputed to stay clear of the H200's memory) with the first
#   LLAMA20B_RECOMPUTE (12) layers recomputed (--recompute-method block), with torch_dist_gpt_bench.py
#   --mode fsdp2 --arch llama --ac beside it: FSDP2 per block with activation checkpointing; its layout names the
#   planner's peak estimate, FsdpPlanTest's), 20b8-dp2 and 20b8-zero3-dp2 (2: 8 layers of that shape at DP2, micro-batch
#   1 x 4, with the distributed optimizer and with ZeRO-3 averaged in the collective: what ZeRO-3 costs at that shape),
#   and issue 33's context-parallel rows, 16k tokens per GPU at micro-batch 1 x 1:
#   cp1 (1: one GPU at 16k), cp2 (2: CP2 at 32k), cp4 (4: CP4 at 64k), cp4-128k (4: CP4 at 128k with full
#   recompute), cp2-a2a (2: CP2 at 32k, --cp-comm-type a2a), cp4-a2a-p2p (4: CP4 at 64k, --cp-comm-type a2a+p2p,
#   --hierarchical-context-parallel-sizes 2 2); issue 34's MoE rows, EP4 x DP4 with the alltoall dispatcher, grouped
#   GEMM and fused permutation: moe-ep4 (4: 8 experts top-2), moe-fg-ep4 (4: 64 experts top-8 of FFN 2048, a shared
#   expert, sigmoid router with expert bias), both without linear biases on either side (--disable-bias-linear, the
#   reference's --no-bias: Mixtral, Qwen3-MoE and DeepSeek-V3 have none; before session 20 the mcore4j side kept the
#   1.3B preset's biases, its experts' included, which the reference's experts never had) and with the distributed
#   optimizer overlapping its gradient reduction (Megatron's MoE recipes; the reference's DDP overlaps), probe-moe
#   and probe-dp4 (4: the probe preset with and without those 8 experts), moe-ep4-fb and moe-fg-ep4-fb (moe-ep4 and moe-fg-ep4 with --moe-router-force-load-balancing, Megatron's
#   benchmark-only routing on random logits, and the reference with --force-balance: at initialisation Megatron's
#   std-0.02 embeddings route most tokens of a layer to the same few experts), dsv3-ep4 (4: issue 39's DeepSeek-V3 pattern at 12 x 2048: MLA, 64 experts top-8 and a shared expert,
#   grouped sigmoid routing, MTP 1), moe-ep4-pad and probe-moe-pad (moe-ep4 and probe-moe with
#   --moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity: every expert's rows fixed, which MoE layers
#   need under GRAPH=1, as in Megatron), "moe" naming the first seven. "probe" names the three probe rows, "cp" cp1 cp2
#   cp4 cp4-128k. Every row is GptBenchmark (= pretrain-gpt
#   --mock-data) of the 1.3B model (L=24 h=2048 heads=16 s=2048 V=32768, micro-batch 4 x 2 per replica), of
#   LLaMA-7B, or of the probe preset with --phases (its step is the host's time); one process per GPU under
#   torchrun. References: eager_gpt_bench.py next to tp1, torch_dist_gpt_bench.py (DTensor TP) next to tp2 and
#   tp4, DDP and FSDP2 next to dp2 and dp4, FSDP2 of the LLaMA shape next to llama20b-zero3, eager at 16k next to cp1, torch_dist_gpt_bench.py --mode cp
#   (PyTorch's context_parallel over SDPA) next to cp2 and cp4, torch_moe_bench.py (all-to-all and _grouped_mm)
#   next to moe-ep4 and moe-fg-ep4.
# Environment:
#   ROWS        rows to run, in this order (default: all that fit GPUS; 4 GPUs: tp1 tp2 tp4 pp2 pp2-vp tp2pp2
#               tp2pp2-vp tp2dp2 dp4 llama-tp4sp llama-tp2dp2 probe; 2 GPUs: tp1 tp2 pp2 pp2-vp dp2 probe-tp1 probe-tp2)
#   GPUS        the host's GPU count (default: nvidia-smi's); a row needing more is reported as skipped
#   BF16        1 (default): --bf16 for mcore4j and bf16 autocast for PyTorch, as issue 32 quotes; 0: fp16 (the
#               presets' default; DDP and eager with fp16 + GradScaler, DTensor TP and FSDP2 stay bf16, their only mode)
#   STEPS (5), WARMUP (2)   timed and untimed steps of every run
#   REFS        1 (default) runs the PyTorch references, 0 leaves them out
#   GRAPH       1: every mcore4j row replays its steps from a CUDA graph (--cuda-graph-impl local --cuda-graph-scope
#               full_iteration, captured within the WARMUP steps; the graph holds --overlap-grad-reduce's reductions
#               too); 0 (default): eager steps
#   CP_ATTENTION  flags of the context-parallel rows' attention (default: --attention-backend flash, the ring on
#               libtorch's flash kernel)
#   EXTRA       more flags for every GptBenchmark run (JVM options, e.g. -Dmcore4j.cuda.kernels=false, go in
#               MCORE4J_JAVA_OPTS)
#   DEADLINE_S  (540) seconds after the start past which no run starts (the rest are reported as skipped), so
#               that the table is printed within one 10-minute call; ROW_TIMEOUT_S (240) caps each run
#   OUT         (/tmp/multi-gpu-check) where each run's full log goes
# The output: `[row] ...` lines (the row's layout, its result lines, failures with the log's tail), then the table.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

CP_ATTENTION=${CP_ATTENTION:---attention-backend flash}
PROBE_LAYERS=24 # the probe preset's layers: a step is PROBE_LAYERS x micro-batches layer passes

# ---- the table, from `[row] ...` lines on stdin -------------------------------------------------------------
summarise() {
  awk -v probe_layers="$PROBE_LAYERS" '
    function commas(n,   s, r) { s = sprintf("%.0f", n); r = ""
      while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) }
      return s r }
    function field(line, re,   m) { return match(line, re) ? substr(line, RSTART, RLENGTH) : "" }
    function after(s, prefix) { return substr(s, length(prefix) + 1) }
    function remember(row) { if (!(row in seen)) { seen[row] = 1; order[++rows] = row } }
    /^\[[A-Za-z0-9_.-]+\] / {
      row = substr($1, 2, length($1) - 2); text = substr($0, length($1) + 2); remember(row)
      if (text ~ /^layout: /) { layout[row] = after(text, "layout: ") }
      else if (text ~ /^gpt-benchmark model=/) {
        tps = field(text, "tokens/s/GPU [0-9.]+"); mfu = field(text, "MFU [0-9.]+%")
        mem = field(text, "memory peak [0-9.]+ GiB"); step = field(text, "step [0-9.]+ ms")
        micro = field(text, "micro=[0-9]+")
        mc[row] = commas(after(tps, "tokens/s/GPU ")) " (" after(mfu, "MFU ") ")"
        memory[row] = after(mem, "memory peak "); steps[row] = after(step, "step "); sub(/ ms$/, "", steps[row])
        micros[row] = after(micro, "micro=")
      } else if (text ~ /^gpt-benchmark phases/) {
        fb = field(text, "forward[+]backward [0-9.]+"); q = field(text, "queued by the host in [0-9.]+")
        fbs[row] = after(fb, "forward+backward "); queued[row] = after(q, "queued by the host in ")
        # a row run more than once (the probe rows, interleaved): every run, and their means
        runs[row]++; fbsum[row] += fbs[row]; qsum[row] += queued[row]
        fblist[row] = (runs[row] > 1 ? fblist[row] ", " : "") fbs[row]
        qlist[row] = (runs[row] > 1 ? qlist[row] ", " : "") queued[row]
      } else if (text ~ /^RESULT /) {
        name = $3; tps = field(text, "tokens/s/gpu=[0-9.]+"); mfu = field(text, "MFU=[0-9.]+%")
        dev = field(text, "device=[0-9.]+GiB"); world = field(text, "world=[0-9]+")
        sub(/^RESULT /, "", name); sub(/^torch-/, "", name)
        ref = name (world != "" ? " ×" after(world, "world=") : "") " " commas(after(tps, "tokens/s/gpu=")) \
              " (" after(mfu, "MFU=") (dev != "" ? ", " after(dev, "device=") " in use" : "") ")"
        prev = (row in refs) ? refs[row] "; " : ""; refs[row] = prev ref
      } else if (text ~ /^status: /) { status[row] = after(text, "status: ")
      } else if (text ~ /^reference status: /) {
        prev = (row in refs) ? refs[row] "; " : ""; refs[row] = prev after(text, "reference status: ")
      }
    }
    END {
      print "| row | layout | mcore4j tokens/s/GPU (MFU) | GPU memory peak | PyTorch, same call |"
      print "|---|---|---|---|---|"
      for (i = 1; i <= rows; i++) {
        r = order[i]; if (r ~ /^probe/) { probes++; continue }
        v = (r in mc) ? mc[r] : ((r in status) ? status[r] : "no result")
        printf "| %s | %s | %s | %s | %s |\n", r, layout[r], v, ((r in memory) ? memory[r] : ""), ((r in refs) ? refs[r] : "—")
      }
      if (probes) {
        print ""
        print "| row | layout | step (ms) | forward+backward (ms) | queued by the host (ms) | host ms per layer pass |"
        print "|---|---|---|---|---|---|"
        for (i = 1; i <= rows; i++) {
          r = order[i]; if (r !~ /^probe/) continue
          if (!(r in fbs)) { printf "| %s | %s | %s | | | |\n", r, layout[r], ((r in status) ? status[r] : "no result"); continue }
          passes = probe_layers * (((r in micros) && micros[r] > 0) ? micros[r] : 2)
          if (runs[r] > 1) {
            printf "| %s | %s | %s | %s (mean %.1f) | %s (mean %.1f) | %.2f |\n", r, layout[r], steps[r], fblist[r], \
                   fbsum[r] / runs[r], qlist[r], qsum[r] / runs[r], qsum[r] / runs[r] / passes
          } else {
            printf "| %s | %s | %s | %s | %s | %.2f |\n", r, layout[r], steps[r], fbs[r], queued[r], queued[r] / passes
          }
        }
        split("probe-moe probe-moe-pad", moes, " ")
        for (i = 1; i <= 2; i++) {
          if (!((moes[i] in runs) && ("probe-dp4" in runs))) continue
          moe = fbsum[moes[i]] / runs[moes[i]]; dense = fbsum["probe-dp4"] / runs["probe-dp4"]
          print ""
          printf "Probe preset, MoE%s host cost against dense (issue 34: at most 2×): forward+backward %.1f ms" \
                 " (mean of %d) against %.1f ms (mean of %d): %.2f×\n", (i == 2 ? " padded to capacity" : ""), moe, \
                 runs[moes[i]], dense, runs["probe-dp4"], moe / dense
        }
      }
    }'
}

# ---- rows -----------------------------------------------------------------------------------------------
# row NAME: sets gpus, layout (words for the table), args (GptBenchmark flags) and refs (reference runs, each
# "N|mode|description[|flags]": N GPUs, mode eager or a torch_dist_gpt_bench.py --mode, more flags for it); returns
# 1 for an unknown name
row() {
  refs=()
  local long="--seq-length 16384 --micro-batch-size 1 --micro-batches 1 $CP_ATTENTION"
  local moe="--expert-model-parallel-size 4 --moe-token-dispatcher-type alltoall --moe-grouped-gemm --moe-permute-fusion"
  local moerecipe="--disable-bias-linear --use-distributed-optimizer --overlap-grad-reduce"
  # issue 36's ~20B LLaMA in torch_dist_gpt_bench.py's flags (the llama7b preset's vocabulary, 32000)
  local llama20b="--arch llama --layers 48 --hidden 6144 --ffn 16384 --heads 48 --kv-heads 8 --seq 4096 --vocab 32000"
  # and in GptBenchmark's, without the layer count, at micro-batch 1 x 4; its ZeRO-3 averages in the collective
  local shape20b="--model llama7b --hidden-size 6144 --ffn-hidden-size 16384 --num-attention-heads 48"
  shape20b+=" --group-query-attention --num-query-groups 8 --seq-length 4096 --micro-batch-size 1 --micro-batches 4"
  local zero3avg="--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --overlap-grad-reduce"
  zero3avg+=" --ddp-average-in-collective"
  moe+=" --use-distributed-optimizer"
  case $1 in
    tp1)          gpus=1; layout="1.3B, 1 GPU"; args="--model 1.3b"; refs=("1|eager|eager + SDPA");;
    tp2)          gpus=2; layout="1.3B, TP2"; args="--model 1.3b --tensor-model-parallel-size 2"
                  refs=("2|tp|DTensor TP2");;
    tp2sp)        gpus=2; layout="1.3B, TP2 + SP"; args="--model 1.3b --tensor-model-parallel-size 2 --sequence-parallel";;
    tp2sp-overlap) gpus=2; layout="1.3B, TP2 + SP, --tp-comm-overlap"
                  args="--model 1.3b --tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap";;
    tp4sp-overlap) gpus=4; layout="1.3B, TP4 + SP, --tp-comm-overlap"
                  args="--model 1.3b --tensor-model-parallel-size 4 --sequence-parallel --tp-comm-overlap";;
    tp4)          gpus=4; layout="1.3B, TP4"; args="--model 1.3b --tensor-model-parallel-size 4"
                  refs=("4|tp|DTensor TP4");;
    pp2)          gpus=2; layout="1.3B, PP2"; args="--model 1.3b --pipeline-model-parallel-size 2";;
    pp2-vp)       gpus=2; layout="1.3B, PP2 interleaved, 2 layers per virtual stage"
                  args="--model 1.3b --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2";;
    pp2-m8)       gpus=2; layout="1.3B, PP2, micro-batch 1 × 8 (the same 8 sequences)"
                  args="--model 1.3b --pipeline-model-parallel-size 2 --micro-batch-size 1 --micro-batches 8";;
    tp2pp2)       gpus=4; layout="1.3B, TP2 × PP2"
                  args="--model 1.3b --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2";;
    tp2pp2-vp)    gpus=4; layout="1.3B, TP2 × PP2 interleaved, 2 layers per virtual stage"
                  args="--model 1.3b --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
                  args+=" --num-layers-per-virtual-pipeline-stage 2";;
    tp2pp2-m8)    gpus=4; layout="1.3B, TP2 × PP2, micro-batch 1 × 8 (the same 8 sequences)"
                  args="--model 1.3b --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2"
                  args+=" --micro-batch-size 1 --micro-batches 8";;
    tp2dp2)       gpus=4; layout="1.3B, TP2 × DP2"; args="--model 1.3b --tensor-model-parallel-size 2 --overlap-grad-reduce";;
    dp2)          gpus=2; layout="1.3B, DP2, distributed optimizer"
                  args="--model 1.3b --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
                  refs=("2|ddp|DDP" "2|fsdp2|FSDP2");;
    dp4)          gpus=4; layout="1.3B, DP4, distributed optimizer"
                  args="--model 1.3b --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"
                  refs=("4|ddp|DDP" "4|fsdp2|FSDP2");;
    dp4-zero2)    gpus=4; layout="1.3B, DP4, Megatron FSDP optim_grads (ZeRO-2)"
                  args="--model 1.3b --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads --overlap-grad-reduce";;
    dp4-zero3)    gpus=4; layout="1.3B, DP4, Megatron FSDP optim_grads_params (ZeRO-3), no recompute"
                  args="--model 1.3b --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params --overlap-grad-reduce";;
    dp4-zero3-recompute) gpus=4; layout="1.3B, DP4, Megatron FSDP optim_grads_params (ZeRO-3), full recompute"
                  args="--model 1.3b --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params"
                  args+=" --overlap-grad-reduce --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";;
    llama20b-zero3) gpus=4; layout="LLaMA ~20B (48 × 6144, FFN 16384, GQA 48/8, s 4096), DP4 ZeRO-3 averaged in the collective, bf16 reduction, ${LLAMA20B_RECOMPUTE:-12} of 48 layers recomputed, micro-batch 1 × 4"
                  args="$shape20b --num-layers 48 $zero3avg --grad-reduce-in-bf16"
                  [ "${LLAMA20B_RECOMPUTE:-12}" -gt 0 ] && args+=" --recompute-granularity full --recompute-method block --recompute-num-layers ${LLAMA20B_RECOMPUTE:-12}"
                  refs=("4|fsdp2|FSDP2 + AC|$llama20b --mbs 1 --micro 4 --ac");;
    20b8-dp2)     gpus=2; layout="8 layers of the ~20B shape, DP2, distributed optimizer, micro-batch 1 × 4"
                  args="$shape20b --num-layers 8 --use-distributed-optimizer --overlap-grad-reduce";;
    20b8-zero3-dp2) gpus=2; layout="8 layers of the ~20B shape, DP2 ZeRO-3 averaged in the collective, micro-batch 1 × 4"
                  args="$shape20b --num-layers 8 $zero3avg";;
    llama-tp4sp)  gpus=4; layout="LLaMA-7B, TP4 + SP, micro-batch 1 × 8"
                  args="--model llama7b --tensor-model-parallel-size 4 --sequence-parallel --micro-batch-size 1 --micro-batches 8";;
    llama-tp4sp-overlap) gpus=4; layout="LLaMA-7B, TP4 + SP, --tp-comm-overlap, micro-batch 1 × 8"
                  args="--model llama7b --tensor-model-parallel-size 4 --sequence-parallel --tp-comm-overlap"
                  args+=" --micro-batch-size 1 --micro-batches 8";;
    llama-tp2dp2) gpus=4; layout="LLaMA-7B, TP2 × DP2, SP, distributed optimizer, micro-batch 1 × 4"
                  args="--model llama7b --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer"
                  args+=" --overlap-grad-reduce --overlap-param-gather --micro-batch-size 1 --micro-batches 4";;
    llama-dp4)    gpus=4; layout="LLaMA-7B, DP4, distributed optimizer, selective recompute, micro-batch 1 × 4"
                  args="--model llama7b --use-distributed-optimizer --overlap-grad-reduce --recompute-granularity selective"
                  args+=" --micro-batch-size 1 --micro-batches 4";;
    cp1)          gpus=1; layout="1.3B, 1 GPU, sequence 16k, micro-batch 1 × 1"; args="--model 1.3b $long"
                  refs=("1|eager|eager + SDPA|--seq 16384 --mbs 1 --micro 1");;
    cp2)          gpus=2; layout="1.3B, CP2, sequence 32k, micro-batch 1 × 1"
                  args="--model 1.3b $long --seq-length 32768 --context-parallel-size 2"
                  refs=("2|cp|PyTorch CP2|--seq 32768 --mbs 1 --micro 1");;
    cp2-a2a)      gpus=2; layout="1.3B, CP2 a2a, sequence 32k, micro-batch 1 × 1"
                  args="--model 1.3b $long --seq-length 32768 --context-parallel-size 2 --cp-comm-type a2a";;
    cp4-a2a-p2p)  gpus=4; layout="1.3B, CP4 a2a+p2p 2 × 2, sequence 64k, micro-batch 1 × 1"
                  args="--model 1.3b $long --seq-length 65536 --context-parallel-size 4 --cp-comm-type a2a+p2p"
                  args+=" --hierarchical-context-parallel-sizes 2 2";;
    cp4)          gpus=4; layout="1.3B, CP4, sequence 64k, micro-batch 1 × 1"
                  args="--model 1.3b $long --seq-length 65536 --context-parallel-size 4"
                  refs=("4|cp|PyTorch CP4|--seq 65536 --mbs 1 --micro 1");;
    cp4-128k)     gpus=4; layout="1.3B, CP4, sequence 128k, micro-batch 1 × 1, full recompute"
                  args="--model 1.3b $long --seq-length 131072 --context-parallel-size 4 --recompute-granularity full"
                  args+=" --recompute-method uniform --recompute-num-layers 1";;
    moe-ep4)      gpus=4; layout="1.3B MoE, 8 experts top-2 (Mixtral style), EP4 × DP4, alltoall, grouped GEMM"
                  args="--model 1.3b $moe $moerecipe --num-experts 8 --moe-router-topk 2 --moe-aux-loss-coeff 1e-2"
                  refs=("4|moe|PyTorch EP4|--experts 8 --topk 2 --moe-ffn 8192 --no-bias");;
    moe-fg-ep4)   gpus=4; layout="1.3B fine-grained MoE, 64 experts top-8 of FFN 2048 + a shared expert, sigmoid + expert bias, EP4 × DP4"
                  args="--model 1.3b $moe $moerecipe --num-experts 64 --moe-router-topk 8 --moe-ffn-hidden-size 2048"
                  args+=" --moe-shared-expert-intermediate-size 2048 --moe-router-score-function sigmoid"
                  args+=" --moe-router-enable-expert-bias --moe-router-load-balancing-type none"
                  refs=("4|moe|PyTorch EP4|--experts 64 --topk 8 --moe-ffn 2048 --shared-ffn 2048 --score sigmoid --expert-bias --no-bias");;
    dsv3-ep4)     gpus=4; layout="DeepSeek-V3 pattern, 12 × 2048: MLA, first layer dense, 64 experts top-8 of FFN 1024 + a shared expert, grouped sigmoid router + expert bias, MTP 1, EP4 × DP4"
                  args="--model llama7b $moe --num-layers 12 --hidden-size 2048 --num-attention-heads 16 --ffn-hidden-size 8192"
                  args+=" --multi-latent-attention --q-lora-rank 768 --kv-lora-rank 512 --qk-head-dim 128"
                  args+=" --qk-pos-emb-head-dim 64 --v-head-dim 128 --num-experts 64 --moe-router-topk 8"
                  args+=" --moe-ffn-hidden-size 1024 --moe-shared-expert-intermediate-size 1024 --moe-layer-freq ([0]*1+[1]*11)"
                  args+=" --moe-router-score-function sigmoid --moe-router-enable-expert-bias --moe-router-num-groups 8"
                  args+=" --moe-router-group-topk 4 --moe-router-topk-scaling-factor 2.5 --moe-router-dtype fp32"
                  args+=" --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-4 --mtp-num-layers 1";;
    moe-ep4-fb|moe-fg-ep4-fb)
                  row "${1%-fb}"; layout+=", forced load balancing (random router logits, both sides)"
                  args+=" --moe-router-force-load-balancing"; refs=("${refs[0]} --force-balance");;
    moe-ep4-pad|probe-moe-pad)
                  row "${1%-pad}"; layout+=", padded to capacity 1.0"
                  args+=" --moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity";;
    probe-dp4)    gpus=4; layout="probe, DP4"; args="--model probe --phases";;
    probe-moe)    gpus=4; layout="probe, MoE 8 experts top-2, EP4 × DP4"; args="--model probe --phases $moe --num-experts 8 --moe-router-topk 2";;
    probe-tp1)    gpus=1; layout="probe, TP1"; args="--model probe --phases";;
    probe-tp2)    gpus=2; layout="probe, TP2"; args="--model probe --phases --tensor-model-parallel-size 2";;
    probe-tp4)    gpus=4; layout="probe, TP4"; args="--model probe --phases --tensor-model-parallel-size 4";;
    *) return 1;;
  esac
}

# ---- running --------------------------------------------------------------------------------------------
# Every line for the table goes to stdout and to $results (say, and the filtered lines of a run's log), so that
# the TERM trap can print the table from what has come so far.
start=$SECONDS
current=""; current_row=""   # the run in progress and its row, for the TERM trap
say() { echo "[$1] ${*:2}" | tee -a "$results"; }

# run ROW NAME N CMD...: runs CMD on N GPUs (N > 1: one process per GPU under torchrun) with a timeout, its full
# log in $out/ROW-NAME.log; prints the result lines (benchmark, phases, RESULT) prefixed by the row, and the
# log's tail when the run fails
run() {
  local r=$1 name=$2 n=$3; shift 3
  local left=$((deadline - (SECONDS - start)))
  local status="status:"; [ "$name" = mcore4j ] || status="reference status: $name"
  if [ "$left" -lt 30 ]; then say "$r" "$status skipped (the ${deadline}-second deadline)"; return 1; fi
  local limit=$((left < row_timeout ? left : row_timeout)) log="$out/$r-${name// /_}.log" code
  say "$r" "run: $name on $n GPU(s), at most ${limit} s (log: $log)"
  if [ "$n" -eq 1 ]; then
    CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} timeout -k 10 "$limit" "$@" >"$log" 2>&1 &
  else
    NCCL_NVLS_ENABLE=0 timeout -k 10 "$limit" torchrun --standalone --nproc_per_node="$n" --no-python "$@" >"$log" 2>&1 &
  fi
  current=$!; current_row=$r; wait "$current"; code=$?; current=""
  grep -E '^(gpt-benchmark|RESULT )' "$log" | sed "s/^/[$r] /" | tee -a "$results"
  if [ "$code" -ne 0 ]; then
    local why="exit $code"; [ "$code" -eq 124 ] && why="timed out after ${limit} s"
    grep -q 'out of memory\|OutOfMemory' "$log" && why="$why, out of memory"
    tail -n 12 "$log" | sed "s/^/[$r]   | /" | tee -a "$results"
    say "$r" "$status failed ($why)"
    free_gpus "$r"
    return 1
  fi
}

# free_gpus ROW: kills whatever a failed run left on the GPUs. torchrun starts its workers in sessions of their
# own, so the timeout's signals stop torchrun but can leave a worker JVM holding its GPU memory (and its GPU)
# through the rows after it.
free_gpus() {
  local pids
  pids=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ' | grep -E '^[0-9]+$' | tr '\n' ' ')
  [ -n "$pids" ] || return 0
  say "$1" "killing what the run left on the GPUs: pids $pids"
  # shellcheck disable=SC2086 # a pid list
  kill -9 $pids 2>/dev/null; sleep 5
}

bench() { # bench ROW N: GptBenchmark with the row's flags
  # shellcheck disable=SC2086 # java_opts, args, prec and extra are flag lists
  run "$1" mcore4j "$2" java $java_opts -cp "$CP" io.mcore4j.samples.bench.GptBenchmark $args $prec \
    --steps "$steps" --warmup "$warmup" $extra
}

reference() { # reference ROW "N|mode|description"
  local r=$1 n mode desc more; IFS='|' read -r n mode desc more <<<"$2"
  local flags=(--steps "$steps" --warmup "$warmup")
  # shellcheck disable=SC2206 # the row's flags are a word list
  [ -n "$more" ] && flags+=($more)
  if [ "$mode" = eager ]; then
    [ "$bf16" = 1 ] && flags+=(--bf16)
    run "$r" "$desc" "$n" python3 "$here/eager_gpt_bench.py" "${flags[@]}"
  elif [ "$mode" = moe ]; then
    run "$r" "$desc" "$n" python3 "$here/torch_moe_bench.py" "${flags[@]}"
  else
    [ "$bf16" = 1 ] || [ "$mode" != ddp ] || flags+=(--fp16)
    run "$r" "$desc" "$n" python3 "$here/torch_dist_gpt_bench.py" --mode "$mode" "${flags[@]}"
  fi
}

# dryrun: the whole script with fake java, torchrun, python3 and nvidia-smi on PATH (4 GPUs; LLaMA runs out of
# memory, FSDP2 outlives its timeout), checking the rows' commands and the table
dryrun() {
  local fake got fail=0; fake=$(mktemp -d)
  cat >"$fake/nvidia-smi" <<'EOF'
#!/bin/bash
if [ "${1:-}" = -L ]; then for i in 0 1 2 3; do echo "GPU $i: Fake H200 (UUID: GPU-$i)"; done; else echo "Fake H200"; fi
EOF
  cat >"$fake/torchrun" <<'EOF'
#!/bin/bash
n=1; while [ $# -gt 0 ]; do case $1 in --nproc_per_node=*) n=${1#*=};; --standalone|--no-python) ;; *) break;; esac; shift; done
[ "${NCCL_NVLS_ENABLE:-}" = 0 ] || { echo "NCCL_NVLS_ENABLE is not 0" >&2; exit 9; }
WORLD_SIZE=$n exec "$@"
EOF
  cat >"$fake/java" <<'EOF'
#!/bin/bash
a=" $* "; tp=1; pp=1; model=1.3b; micro=2
[[ $a =~ --tensor-model-parallel-size\ ([0-9]) ]] && tp=${BASH_REMATCH[1]}
[[ $a =~ --pipeline-model-parallel-size\ ([0-9]) ]] && pp=${BASH_REMATCH[1]}
[[ $a =~ --model\ ([a-z0-9.]+) ]] && model=${BASH_REMATCH[1]}
[[ $a =~ --micro-batches\ ([0-9]+) ]] && micro=${BASH_REMATCH[1]}
[[ $a == *" --bf16 "* && $a == *" --steps 5 --warmup 2 "* && $a == *" -cp fake.jar "* ]] || { echo "bad flags: $a" >&2; exit 8; }
[ "$model" = llama7b ] && { echo "java.lang.OutOfMemoryError: CUDA out of memory" >&2; exit 1; }
w=${WORLD_SIZE:-1}; dp=$((w / tp / pp))
echo "gpt-benchmark model=$model layout=TP$tp CP1 PP$pp DP$dp attention=sdpa mbs=4 micro=$micro seq=2048 | tokens/s/GPU $((60000 / tp / pp)).4 | TFLOP/s/GPU 1.0 | MFU $((50 / tp)).5% | step 99.0 ms | GPU memory peak 3$tp.0 GiB, end of step 1.0 GiB | loss 10.1"
[[ $a == *" --phases "* ]] && echo "gpt-benchmark phases (ms per step, device synchronised between them): data 0.1 | forward+backward $((100 * tp)).0 (queued by the host in $((96 * tp)).0) | gradient sync 0.1 | optimizer step 1.0 | zero grad 0.1"
exit 0
EOF
  cat >"$fake/python3" <<'EOF'
#!/bin/bash
case "$*" in
  *eager_gpt_bench.py*--bf16*) echo "RESULT eager-sdpa-bf16 L=24 step=1ms tokens/s/gpu=50000 TFLOP/s/gpu=1 MFU=44.0% peakmem=1GiB (allocated) device=40.0GiB (in use, of 139.8)";;
  *--mode\ fsdp2*) sleep 20;;
  *--mode\ *) m=$(sed 's/.*--mode \([a-z0-9]*\).*/\1/' <<<"$*"); echo "RESULT torch-$m-bf16 world=$WORLD_SIZE tp=1 dp=1 step=1ms tokens/s/gpu=9000 MFU=8.0% loss=10 peakmem=1GiB (allocated) device=20.0GiB (in use)";;
  *) echo "unexpected python3 $*" >&2; exit 7;;
esac
EOF
  chmod +x "$fake"/*
  got=$(PATH="$fake:$PATH" CP=fake.jar GPUS= ROWS="tp1 tp4 dp4 llama-tp4sp probe" ROW_TIMEOUT_S=3 OUT="$fake/out" \
        STEPS= WARMUP= BF16= EXTRA= REFS= DEADLINE_S= MCORE4J_JAVA_OPTS=-Dx=1 bash "$0" 2>&1)
  expect() { grep -qF -- "$1" <<<"$got" || { echo "selftest: FAIL, the dry run has no line with: $1"; fail=1; }; }
  expect "[tp1] gpt-benchmark model=1.3b layout=TP1 CP1 PP1 DP1"
  expect "| tp1 | 1.3B, 1 GPU | 60,000 (50.5%) | 31.0 GiB | eager-sdpa-bf16 50,000 (44.0%, 40.0GiB in use) |"
  expect "| tp4 | 1.3B, TP4 | 15,000 (12.5%) | 34.0 GiB | tp-bf16 ×4 9,000 (8.0%, 20.0GiB in use) |"
  expect "| dp4 | 1.3B, DP4, distributed optimizer | 60,000 (50.5%) | 31.0 GiB | ddp-bf16 ×4 9,000 (8.0%, 20.0GiB in use); FSDP2 failed (timed out after 3 s) |"
  expect "| llama-tp4sp | LLaMA-7B, TP4 + SP, micro-batch 1 × 8 | failed (exit 1, out of memory) |  | — |"
  expect "| probe-tp4 | probe, TP4 | 99.0 | 400.0 | 384.0 | 8.00 |"
  expect "multi-GPU check, "
  [ "$fail" -eq 0 ] || echo "$got" | sed 's/^/dry run: /'
  rm -rf "$fake"
  [ "$fail" -eq 0 ]
}

selftest() {
  local got fail=0
  got=$(summarise <<'EOF'
[tp1] layout: 1.3B, 1 GPU
[tp1] gpt-benchmark model=1.3b layout=TP1 CP1 PP1 DP1 attention=sdpa mbs=4 micro=2 seq=2048 | tokens/s/GPU 64944 | TFLOP/s/GPU 575.6 | MFU 58.2% | step 252.3 ms | GPU memory peak 33.7 GiB, end of step 33.1 GiB | loss 10.4512
[tp1] RESULT eager-sdpa-bf16 L=24 h=2048 s=2048 V=32768 mbs=4 micro=2 step=318.5ms tokens/s/gpu=51447 TFLOP/s/gpu=456.0 MFU=46.1% peakmem=39.1GiB (allocated) device=41.0GiB (in use, of 139.8)
[tp4] layout: 1.3B, TP4
[tp4] run: mcore4j on 4 GPU(s), at most 240 s (log: /tmp/x)
[tp4] gpt-benchmark model=1.3b layout=TP4 CP1 PP1 DP1 attention=sdpa mbs=4 micro=2 seq=2048 | tokens/s/GPU 16120 | TFLOP/s/GPU 142.9 | MFU 14.4% | step 254.1 ms | GPU memory peak 14.2 GiB, end of step 14.0 GiB | loss 10.4600
[tp4] RESULT torch-tp-bf16 world=4 tp=4 dp=1 L=24 h=2048 s=2048 V=32768 mbs=4 micro=2 step=467.3ms tokens/s/gpu=8765 MFU=7.9% loss=10.512 peakmem=20.1GiB (allocated) device=22.0GiB (in use)
[dp4] layout: 1.3B, DP4, distributed optimizer
[dp4] gpt-benchmark model=1.3b layout=TP1 CP1 PP1 DP4 attention=sdpa mbs=4 micro=2 seq=2048 | tokens/s/GPU 58474 | TFLOP/s/GPU 517.9 | MFU 52.4% | step 280.2 ms | GPU memory peak 25.5 GiB, end of step 25.0 GiB | loss 10.45
[dp4] RESULT torch-ddp-bf16 world=4 tp=1 dp=4 L=24 h=2048 s=2048 V=32768 mbs=4 micro=2 step=332.4ms tokens/s/gpu=49292 MFU=44.2% loss=10.5 peakmem=30.0GiB (allocated) device=31.2GiB (in use)
[dp4] reference status: DDP failed (timed out after 240 s)
[dp4] RESULT torch-fsdp2-bf16 world=4 tp=1 dp=4 L=24 h=2048 s=2048 V=32768 mbs=4 micro=2 step=352.4ms tokens/s/gpu=46499 MFU=41.6% loss=10.5 peakmem=24.0GiB (allocated) device=25.5GiB (in use)
[llama-tp4sp] layout: LLaMA-7B, TP4 + SP, micro-batch 1 × 8
[llama-tp4sp]   | java.lang.OutOfMemoryError: CUDA out of memory
[llama-tp4sp] status: failed (exit 1, out of memory)
[llama20b-zero3] layout: LLaMA ~20B, DP4 ZeRO-3
[llama20b-zero3] RESULT torch-fsdp2-ac-bf16 world=4 tp=1 cp=1 dp=4 L=48 h=6144 s=4096 V=32000 arch=llama ffn=16384 heads=48 kv=8 mbs=1 micro=4 step=6000.0ms tokens/s/gpu=2730 MFU=35.3% loss=10.4 peakmem=90.0GiB (allocated) device=95.0GiB (in use)
[pp2] layout: 1.3B, PP2
[pp2] status: skipped (needs 2 GPUs, the host has 1)
[probe-tp1] layout: probe, TP1
[probe-tp1] gpt-benchmark model=probe layout=TP1 CP1 PP1 DP1 attention=sdpa mbs=4 micro=2 seq=2048 | tokens/s/GPU 95000 | TFLOP/s/GPU 1.0 | MFU 0.1% | step 180.2 ms | GPU memory peak 2.1 GiB, end of step 2.0 GiB | loss 10.3
[probe-tp1] gpt-benchmark phases (ms per step, device synchronised between them): data 0.4 | forward+backward 172.0 (queued by the host in 168.5) | gradient sync 0.1 | optimizer step 4.2 | zero grad 0.3
[probe-tp4] layout: probe, TP4
[probe-tp4] status: skipped (the 540-second deadline)
[probe-dp4] layout: probe, DP4
[probe-dp4] gpt-benchmark phases (ms per step, device synchronised between them): data 0.4 | forward+backward 180.0 (queued by the host in 179.0) | gradient sync 0.1 | optimizer step 4.2 | zero grad 0.3
[probe-moe] layout: probe, MoE 8 experts top-2, EP4 × DP4
[probe-moe] gpt-benchmark phases (ms per step, device synchronised between them): data 0.4 | forward+backward 380.0 (queued by the host in 378.0) | gradient sync 0.1 | optimizer step 4.2 | zero grad 0.3
[probe-dp4] gpt-benchmark phases (ms per step, device synchronised between them): data 0.4 | forward+backward 200.0 (queued by the host in 199.0) | gradient sync 0.1 | optimizer step 4.2 | zero grad 0.3
[probe-moe] gpt-benchmark phases (ms per step, device synchronised between them): data 0.4 | forward+backward 390.0 (queued by the host in 388.0) | gradient sync 0.1 | optimizer step 4.2 | zero grad 0.3
some other line that is not a row's
EOF
)
  echo "$got"
  expect() { grep -qF -- "$1" <<<"$got" || { echo "selftest: FAIL, no line with: $1"; fail=1; }; }
  expect "| tp1 | 1.3B, 1 GPU | 64,944 (58.2%) | 33.7 GiB | eager-sdpa-bf16 51,447 (46.1%, 41.0GiB in use) |"
  expect "| tp4 | 1.3B, TP4 | 16,120 (14.4%) | 14.2 GiB | tp-bf16 ×4 8,765 (7.9%, 22.0GiB in use) |"
  expect "| dp4 | 1.3B, DP4, distributed optimizer | 58,474 (52.4%) | 25.5 GiB | ddp-bf16 ×4 49,292 (44.2%, 31.2GiB in use); DDP failed (timed out after 240 s); fsdp2-bf16 ×4 46,499 (41.6%, 25.5GiB in use) |"
  expect "| llama-tp4sp | LLaMA-7B, TP4 + SP, micro-batch 1 × 8 | failed (exit 1, out of memory) |  | — |"
  expect "| pp2 | 1.3B, PP2 | skipped (needs 2 GPUs, the host has 1) |  | — |"
  expect "| llama20b-zero3 | LLaMA ~20B, DP4 ZeRO-3 | no result |  | fsdp2-ac-bf16 ×4 2,730 (35.3%, 95.0GiB in use) |"
  row llama20b-zero3
  [[ "${refs[0]}" == "4|fsdp2|FSDP2 + AC|--arch llama --layers 48 --hidden 6144 --ffn 16384 --heads 48 --kv-heads 8 --seq 4096 --vocab 32000 --mbs 1 --micro 4 --ac" ]] \
    || { echo "selftest: FAIL, llama20b-zero3's reference is ${refs[0]:-none}"; fail=1; }
  expect "| probe-tp1 | probe, TP1 | 180.2 | 172.0 | 168.5 | 3.51 |"
  expect "| probe-tp4 | probe, TP4 | skipped (the 540-second deadline) | | | |"
  expect "| probe-dp4 | probe, DP4 |  | 180.0, 200.0 (mean 190.0) | 179.0, 199.0 (mean 189.0) | 3.94 |"
  expect "forward+backward 385.0 ms (mean of 2) against 190.0 ms (mean of 2): 2.03×"
  [ "$(grep -c '^| tp1 ' <<<"$got")" -eq 1 ] || { echo "selftest: FAIL, tp1 is not one row"; fail=1; }
  grep -q 'other line' <<<"$got" && { echo "selftest: FAIL, a line of no row reached the table"; fail=1; }
  # every default row is defined, and an unknown one is refused
  local r; for r in tp1 tp2 tp2sp tp2sp-overlap tp4 tp4sp-overlap pp2 pp2-vp pp2-m8 tp2pp2 tp2pp2-vp tp2pp2-m8 tp2dp2 dp2 dp4 dp4-zero2 dp4-zero3 dp4-zero3-recompute llama20b-zero3 llama-tp4sp llama-tp4sp-overlap llama-tp2dp2 llama-dp4 probe-tp1 probe-tp2 \
      probe-tp4 cp1 cp2 cp2-a2a cp4 cp4-a2a-p2p cp4-128k moe-ep4 moe-ep4-fb moe-fg-ep4 moe-fg-ep4-fb dsv3-ep4 probe-dp4 probe-moe moe-ep4-pad probe-moe-pad; do
    row "$r" || { echo "selftest: FAIL, row $r is not defined"; fail=1; }
  done
  row nonsense && { echo "selftest: FAIL, an unknown row was accepted"; fail=1; }
  dryrun || fail=1
  [ "$fail" -eq 0 ] && echo "selftest: PASS (the table from fake lines, and a dry run with fake java, torchrun and python3)" \
    || { echo "selftest: FAIL"; return 1; }
}

case ${1:-} in
  --selftest) selftest; exit $?;;
  --table) summarise <"${2:?usage: multi-gpu-check.sh --table FILE}"; exit 0;;
  "") ;;
  *) echo "usage: multi-gpu-check.sh [--selftest | --table FILE]" >&2; exit 2;;
esac

: "${CP:?CP is not set: source .gpu/run-on-host.sh first (docs/gpu.md)}"
steps=${STEPS:-5}; warmup=${WARMUP:-2}; extra=${EXTRA:-}; bf16=${BF16:-1}; graph=${GRAPH:-0}
graph_warmup=$((warmup > 2 ? 2 : 1)) # eager steps before the capture, which comes within the untimed steps
deadline=${DEADLINE_S:-540}; row_timeout=${ROW_TIMEOUT_S:-240}
out=${OUT:-/tmp/multi-gpu-check}; mkdir -p "$out"
java_opts="${MCORE4J_JAVA_OPTS:--Dai.djl.offline=true} -Xmx16g -Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
prec=""; [ "$bf16" = 1 ] && prec="--bf16"
host_gpus=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
if [ -z "${ROWS:-}" ]; then
  if [ "$host_gpus" -ge 4 ]; then ROWS="tp1 tp2 tp4 pp2 pp2-vp tp2pp2 tp2pp2-vp tp2dp2 dp4 llama-tp4sp llama-tp2dp2 probe"
  else ROWS="tp1 tp2 pp2 pp2-vp dp2 probe-tp1 probe-tp2"; fi
fi
rows=""
for r in $ROWS; do
  case $r in
    probe) rows+=" probe-tp1 probe-tp2 probe-tp4";; cp) rows+=" cp1 cp2 cp4 cp4-128k";; fsdp) rows+=" dp4 dp4-zero2 dp4-zero3";;
    moe) rows+=" moe-ep4 moe-ep4-fb moe-fg-ep4 moe-fg-ep4-fb dsv3-ep4 probe-dp4 probe-moe";; *) rows+=" $r";;
  esac
done
for r in $rows; do row "$r" || { echo "multi-gpu-check: unknown row $r" >&2; exit 2; }; done

results=$out/results.txt
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "multi-gpu-check: $(date -u +%Y-%m-%d), ${host_gpus} × ${gpu_name:-unknown GPU}, $([ "$bf16" = 1 ] && echo bf16 || echo fp16),$([ "$graph" = 1 ] && echo " CUDA graphs,")" \
  "commit $(cat "${CP%/lib/\*}/COMMIT" 2>/dev/null || git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown), steps $steps after warmup $warmup, rows:$rows" \
  | tee "$results"
table() { echo; echo "## $(head -1 "$results" | sed 's/^multi-gpu-check: /multi-GPU check, /')"; echo; summarise <"$results"; }
stopped() {
  if [ -n "$current" ]; then kill -TERM "$current" 2>/dev/null; say "$current_row" "status: stopped with the call"; fi
  echo "multi-gpu-check: stopped"; table; exit 124
}
trap stopped TERM INT
for r in $rows; do
  row "$r"
  if [ "$graph" = 1 ]; then
    args+=" --cuda-graph-impl local --cuda-graph-scope full_iteration --cuda-graph-warmup-steps $graph_warmup"
    layout+=", CUDA graph"
  fi
  say "$r" "layout: $layout"
  if [ "$gpus" -gt "$host_gpus" ]; then say "$r" "status: skipped (needs $gpus GPUs, the host has $host_gpus)"; continue; fi
  bench "$r" "$gpus"
  if [ "${REFS:-1}" = 1 ]; then for ref in "${refs[@]}"; do reference "$r" "$ref"; done; fi
done
table
