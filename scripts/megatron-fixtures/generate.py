#!/usr/bin/env python3
"""Writes the reference numbers that pin mcore4j to Megatron-LM's behaviour.

Runs Megatron-LM's own code (a checkout given with --megatron, imported from there, never copied) with
CPU torch and numpy, and writes JSON fixtures that the Java tests read:

  data/src/test/resources/megatron/numpy_random_state.json  numpy RandomState seeding, shuffle, permutation
  data/src/test/resources/megatron/gpt_indices.json         GPTDataset document/sample/shuffle indices and
                                                            the first 200 samples of a fixed corpus, two seeds,
                                                            plus a two-dataset blend
  data/src/test/resources/megatron/splits.json              --split ranges over a grid of sequence counts
  moe/src/test/resources/megatron/routing.json              top-k routing, token dropping/padding, aux/z loss
  moe/src/test/resources/megatron/router.json               Megatron-Core's TopKRouter.routing itself (one CPU rank):
                                                            sigmoid scores with an expert bias, group-limited top-k,
                                                            top-k scaling, aux/seq/global aux losses (also as lists),
                                                            z-loss, capacity; probabilities, maps, the logits'
                                                            gradient, token counts and the expert-bias update

Usage (Megatron's C++ helpers compiled first with `make -C megatron/core/datasets`):
  python3 scripts/megatron-fixtures/generate.py --megatron /path/to/Megatron-LM --repo .
  python3 scripts/megatron-fixtures/generate.py --megatron /path/to/Megatron-LM --repo . --only router

The fixed corpus is defined here (document_lengths, token) and rebuilt by the Java tests with mcore4j's own
writer, so no binary data is committed.
"""
import argparse
import json
import os
import sys
import tempfile

import numpy


def document_lengths(count, salt):
    """Deterministic sequence lengths 0..57 (a few zero-length sequences on purpose)."""
    return [((d * 37 + salt * 11) % 58) if (d + salt) % 17 != 5 else 0 for d in range(count)]


def token(sequence, position, salt):
    """Deterministic, unique-ish token id of a position, below 2^31."""
    return (salt * 1_000_003 + sequence * 1009 + position) % 2_000_000_000


def write_corpus(prefix, lengths, salt, empty_documents=0):
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=numpy.int32)
    import torch
    for s, n in enumerate(lengths):
        builder.add_item(torch.tensor([token(s, i, salt) for i in range(n)], dtype=torch.int32))
        builder.end_document()
    for _ in range(empty_documents):
        builder.end_document()
    builder.finalize(prefix + ".idx")


class _Tokenizer:
    """The few attributes GPTDatasetConfig reads from a tokenizer."""
    vocab_size = 2_000_000_000
    eod = 0
    pad = -1
    unique_identifiers = {"class": "fixture"}


def gpt_config(seed, seq, blend, split, cache):
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig
    return GPTDatasetConfig(
        random_seed=seed, sequence_length=seq, blend=blend, split=split, path_to_cache=cache,
        tokenizer=_Tokenizer(), reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
        create_attention_mask=False)


def build(sizes, config):
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()


def sample_text(dataset, i):
    """The sequence_length + 1 token ids of sample i (inputs plus the last label)."""
    text, _, _ = dataset._query_document_sample_shuffle_indices(i)
    return [int(t) for t in text]


def numpy_fixture():
    out = {"numpy_version": numpy.__version__, "seeds": []}
    for seed in [0, 1, 42, 1234, 5489, 2**31 - 1, 2**32 - 1]:
        rs = numpy.random.RandomState(seed)
        key = rs.get_state()[1]
        entry = {"seed": seed, "key_head": [int(k) for k in key[:4]], "key_tail": [int(k) for k in key[-2:]],
                 "permutations": {}, "shuffles": []}
        for n in [1, 2, 3, 7, 10, 100, 1000]:
            entry["permutations"][str(n)] = [int(v) for v in rs.permutation(n)]
        # a long shuffle (above 2^16, so masks beyond 16 bits are drawn); keep a digest plus its ends
        big = numpy.arange(70_001, dtype=numpy.int32)
        rs.shuffle(big)
        entry["shuffles"].append({"n": 70_001, "head": [int(v) for v in big[:20]], "tail": [int(v) for v in big[-20:]],
                                  "weighted_sum": int(numpy.sum(big.astype(numpy.int64) * numpy.arange(70_001) % 1_000_003))})
        # the stream position after all of the above
        entry["after"] = [int(v) for v in rs.permutation(5)]
        out["seeds"].append(entry)
    return out


def gpt_fixture(work):
    from megatron.core.datasets.gpt_dataset import GPTDataset
    out = {"cases": []}
    lengths_a = document_lengths(61, 1)
    prefix_a = os.path.join(work, "corpus_a")
    write_corpus(prefix_a, lengths_a, 1)
    lengths_b = document_lengths(43, 2)
    prefix_b = os.path.join(work, "corpus_b")
    write_corpus(prefix_b, lengths_b, 2)
    out["corpora"] = {"a": {"salt": 1, "lengths": lengths_a}, "b": {"salt": 2, "lengths": lengths_b}}

    cases = [
        # name, seed, seq, split, sizes, blend
        ("seed1234", 1234, 32, "949,40,11", [700, 40, 10], ([prefix_a], None)),
        ("seed42", 42, 16, "90,8,2", [3000, 100, 30], ([prefix_a], None)),
        ("blend_seed7", 7, 16, "80,20,0", [400, 50, 0], ([prefix_a, prefix_b], [0.3, 0.7])),
    ]
    for name, seed, seq, split, sizes, blend in cases:
        config = gpt_config(seed, seq, blend, split, os.path.join(work, "cache_" + name))
        datasets = build(sizes, config)
        case = {"name": name, "seed": seed, "sequence_length": seq, "split": split, "sizes": sizes,
                "blend": {"corpora": ["a" if p == prefix_a else "b" for p in blend[0]], "weights": blend[1]},
                "splits": []}
        for split_index, ds in enumerate(datasets):
            entry = {"split": split_index, "present": ds is not None}
            if ds is None:
                case["splits"].append(entry)
                continue
            entry["length"] = len(ds)
            first = min(200, len(ds))
            if isinstance(ds, GPTDataset):
                components = [ds]
                entry["samples"] = [sample_text(ds, i) for i in range(first)]
            else:
                components = ds.datasets
                entry["dataset_index"] = [int(v) for v in ds.dataset_index]
                entry["dataset_sample_index"] = [int(v) for v in ds.dataset_sample_index]
                entry["samples"] = [sample_text(ds.datasets[ds.dataset_index[i]], int(ds.dataset_sample_index[i]))
                                    for i in range(first)]
            entry["components"] = []
            for c in components:
                entry["components"].append({
                    "indices": [int(c.indices[0]), int(c.indices[-1]) + 1] if len(c.indices) else [0, 0],
                    "num_samples": c.num_samples,
                    "document_index": [int(v) for v in c.document_index],
                    "sample_index": [[int(v) for v in row] for row in c.sample_index],
                    "shuffle_index": [int(v) for v in c.shuffle_index],
                })
            case["splits"].append(entry)
        out["cases"].append(case)
    return out


def splits_fixture(work):
    """--split ranges, from Megatron's own builder run over indexed datasets of N sequences."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset

    captured = []

    class Capture(GPTDataset):
        # records the sequence range the builder hands each split instead of building indices
        def __init__(self, low_level_dataset, dataset_path, indexed_indices, num_samples, index_split, config):
            captured.append((index_split.value, [int(indexed_indices[0]), int(indexed_indices[-1]) + 1]
                             if len(indexed_indices) else [None, None], len(indexed_indices)))

        def __len__(self):
            return 0

    out = {"cases": []}
    grid_n = [1, 2, 3, 7, 10, 25, 49, 50, 99, 100, 101, 999, 1000, 1001, 12345]
    grid_split = ["969,30,1", "98,2,0", "90,10,0", "99,1", "100", "1,1,1", "2,1,1", "0.9,0.05,0.05",
                  "0,1,0", "49,49,2", "7/2/1", "33,33,34", "999,1"]
    for n, empty in [(n, 0) for n in grid_n] + [(90, 10)]:
        prefix = os.path.join(work, f"split_{n}_{empty}")
        write_corpus(prefix, [1] * n, 3, empty_documents=empty)
        for split in grid_split:
            captured.clear()
            config = gpt_config(1, 2, ([prefix], None), split, None)
            BlendedMegatronDatasetBuilder(Capture, [1, 1, 1], lambda: True, config).build()
            ranges = [None, None, None]
            for split_index, bounds, count in captured:
                ranges[split_index] = [bounds[0], bounds[0] + count] if count else "empty"
            out["cases"].append({"sequences": n, "empty_documents_after": empty, "split": split,
                                 "split_matrix": config.split_matrix, "ranges": ranges})
    return out


def routing_fixture():
    import torch
    _moe_importable_without_triton()
    from megatron.core.transformer.moe import moe_utils as mu

    out = {"torch_version": torch.__version__, "cases": [], "losses": []}
    g = torch.Generator().manual_seed(2024)
    tokens, experts = 16, 8
    # logits on a 1/4 (1/64) grid so that ties occur and every value is exact in JSON
    logit_sets = {
        "ties": (torch.randint(-8, 9, (tokens, experts), generator=g).float() / 4),
        "smooth": (torch.randn(tokens, experts, generator=g) * 64).round() / 64,
        "flat": torch.zeros(tokens, experts),
    }

    def bits(m):
        return ["".join(str(int(v)) for v in row) for row in m.int().tolist()]

    for name, logits in logit_sets.items():
        for score in ["softmax", "sigmoid"]:
            for pre in ([False, True] if score == "softmax" else [False]):
                for topk in [1, 2, 3]:
                    with torch.enable_grad():  # training: Megatron's top-k is sorted when grad is on
                        probs, routing_map = mu.topk_routing_with_score_function(
                            logits, topk, use_pre_softmax=pre, score_function=score)
                    case = {"logits": name, "score": score, "pre_softmax": pre, "topk": topk,
                            "probs": [[float("%.9g" % v) for v in row] for row in probs.tolist()],
                            "routing_map": bits(routing_map), "dropping": []}
                    for factor in [0.5, 1.0, 1.25, 4.0]:
                        for policy in ["probs", "position"]:
                            for pad in [False, True]:
                                p, m = mu.apply_router_token_dropping(
                                    probs, routing_map, topk, factor, drop_policy=policy, pad_to_capacity=pad)
                                # final probs are probs masked by the final map: checked in the fixture, not stored
                                assert torch.equal(p, probs * m)
                                case["dropping"].append({
                                    "capacity_factor": factor, "drop_policy": policy, "pad": pad,
                                    "capacity": mu.get_capacity(tokens * topk, experts, factor),
                                    "final_map": bits(m)})
                    out["cases"].append(case)
    out["logit_sets"] = {k: v.tolist() for k, v in logit_sets.items()}
    # auxiliary losses on the smooth logits, as TopKRouter computes them on one rank
    logits = logit_sets["smooth"]
    seq, batch = 4, 4  # tokens = seq * batch, sequence-major
    for score in ["softmax", "sigmoid"]:
        for topk in [1, 2, 3]:
            routing_map, scores = mu.compute_routing_scores_for_aux_loss(logits, topk, score)
            counts = routing_map.sum(dim=0)
            aux = mu.switch_load_balancing_loss_func(scores, counts, tokens, topk, experts, 1e-2)
            seq_map = routing_map.reshape(seq, -1)
            seq_scores = scores.reshape(seq, -1)
            seq_aux = mu.switch_load_balancing_loss_func(
                seq_scores, seq_map.sum(dim=0), seq, topk, experts, 1e-2) / batch
            out["losses"].append({"logits": "smooth", "score": score, "topk": topk, "coeff": 1e-2,
                                  "sequence_length": seq, "batch": batch,
                                  "tokens_per_expert": counts.tolist(),
                                  "aux_loss": aux.item(), "seq_aux_loss": seq_aux.item()})
    out["z_loss"] = [{"logits": k, "coeff": 1e-3, "z_loss": mu.z_loss_func(v, 1e-3).item()}
                     for k, v in logit_sets.items()]
    return out


def _moe_importable_without_triton():
    """Newer Megatron-LM imports triton when moe_utils loads (through the paged stash, which routing never calls);
    without triton that module is replaced by an empty one."""
    import types
    try:
        import triton  # noqa: F401
    except ImportError:
        stub = types.ModuleType("megatron.core.transformer.moe.ops.paged_stash")
        stub.__getattr__ = lambda name: None
        sys.modules["megatron.core.transformer.moe.ops.paged_stash"] = stub


def _router_on_one_cpu_rank():
    """Lets Megatron-Core's TopKRouter run on one CPU process: a one-rank gloo group, its buffers on the CPU.

    The router places its buffers on torch.cuda.current_device(), which is pointed at the CPU; its jit_fuser
    (torch.compile) is turned off.
    """
    import torch
    _moe_importable_without_triton()
    torch.cuda.current_device = lambda: "cpu"
    import megatron.core.jit as jit
    jit.disable_jit_fuser()
    import torch.distributed as dist
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)


def router_fixture():
    """Megatron-Core's TopKRouter.routing on given logits, in training mode, with every routing option mcore4j maps."""
    import torch
    _router_on_one_cpu_rank()
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe import moe_utils as mu
    from megatron.core.transformer.moe.router import TopKRouter
    from megatron.core.transformer.transformer_config import TransformerConfig

    g = torch.Generator().manual_seed(34)
    seq, batch, experts = 4, 4, 8
    tokens = seq * batch
    # values on a 1/64 grid (exact in JSON); "ties" repeats values within and across tokens
    logit_sets = {
        "smooth": (torch.randn(tokens, experts, generator=g) * 64).round() / 64,
        "ties": torch.randint(-6, 7, (tokens, experts), generator=g).float() / 4,
    }
    upstream = (torch.randn(tokens, experts, generator=g) * 64).round() / 64
    bias = [0.25, -0.125, 0.0, 0.5, -0.25, 0.125, -0.5, 0.375]
    cases = [
        ("sigmoid_bias_top2_aux", dict(moe_router_topk=2, moe_router_score_function="sigmoid",
                                       moe_router_enable_expert_bias=True, moe_router_load_balancing_type="aux_loss",
                                       moe_aux_loss_coeff=1e-2)),
        ("sigmoid_bias_top1", dict(moe_router_topk=1, moe_router_score_function="sigmoid",
                                   moe_router_enable_expert_bias=True, moe_router_load_balancing_type="none")),
        ("sigmoid_bias_groups_scaled_seq_z", dict(moe_router_topk=4, moe_router_score_function="sigmoid",
                                                  moe_router_enable_expert_bias=True, moe_router_num_groups=4,
                                                  moe_router_group_topk=2, moe_router_topk_scaling_factor=2.5,
                                                  moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-2,
                                                  moe_z_loss_coeff=1e-3)),
        ("softmax_groups_scaled_seq_z", dict(moe_router_topk=2, moe_router_num_groups=4, moe_router_group_topk=2,
                                             moe_router_topk_scaling_factor=1.5,
                                             moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-2,
                                             moe_z_loss_coeff=1e-3)),
        ("presoftmax_groups_global", dict(moe_router_topk=3, moe_router_pre_softmax=True, moe_router_num_groups=2,
                                          moe_router_group_topk=1, moe_router_load_balancing_type="global_aux_loss",
                                          moe_aux_loss_coeff=1e-2)),
        ("softmax_top3_aux_and_seq_z", dict(moe_router_topk=3, moe_router_load_balancing_type=["aux_loss", "seq_aux_loss"],
                                            moe_aux_loss_coeff=[1e-2, 5e-3], moe_z_loss_coeff=1e-3)),
        ("sigmoid_groups_capacity_padded", dict(moe_router_topk=2, moe_router_score_function="sigmoid",
                                                moe_router_num_groups=4, moe_router_group_topk=2,
                                                moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True,
                                                moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=1e-2)),
        ("presoftmax_top1_scaled_z", dict(moe_router_topk=1, moe_router_pre_softmax=True,
                                          moe_router_topk_scaling_factor=2.0, moe_router_load_balancing_type="none",
                                          moe_z_loss_coeff=1e-3)),
    ]

    def bits(m):
        return ["".join(str(int(v)) for v in row) for row in m.int().tolist()]

    def rows(t):
        return [[float("%.9g" % v) for v in row] for row in t.tolist()]

    pg = ProcessGroupCollection.use_mpu_process_groups()
    out = {"torch_version": torch.__version__, "sequence_length": seq, "batch": batch, "experts": experts,
           "logit_sets": {k: v.tolist() for k, v in logit_sets.items()}, "upstream": upstream.tolist(),
           "expert_bias": bias, "bias_update_rate": 1e-3, "cases": []}
    for name, options in cases:
        config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1, num_moe_experts=experts,
                                   add_bias_linear=False, use_cpu_initialization=True,
                                   moe_router_bias_update_rate=1e-3, **options)
        for logits_name, values in logit_sets.items():
            router = TopKRouter(config, pg_collection=pg)
            router.set_layer_number(1)
            router.train()
            if router.expert_bias is not None:
                router.expert_bias.copy_(torch.tensor(bias))
            logits = values.clone().reshape(seq, batch, experts).requires_grad_()
            probs, routing_map = router.routing(logits)
            probs.backward(upstream)
            case = {"name": name, "logits": logits_name,
                    "options": {k: v for k, v in options.items()},
                    "probs": rows(probs.detach()), "routing_map": bits(routing_map),
                    "logits_grad": rows(logits.grad.reshape(tokens, experts))}
            if router.expert_bias is not None:
                counts = router.local_tokens_per_expert.clone()
                case["tokens_per_expert"] = counts.tolist()
                case["updated_expert_bias"] = mu.get_updated_expert_bias(
                    counts, router.expert_bias, config.moe_router_bias_update_rate).tolist()
            out["cases"].append(case)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megatron", required=True, help="Megatron-LM checkout (helpers compiled)")
    parser.add_argument("--repo", default=".", help="mcore4j checkout to write the fixtures into")
    parser.add_argument("--only", choices=["data", "routing", "router"], action="append",
                        help="write only these fixtures (repeatable; default: all)")
    args = parser.parse_args()
    wanted = set(args.only or ["data", "routing", "router"])
    sys.path.insert(0, os.path.abspath(args.megatron))
    import torch
    torch.manual_seed(0)

    data_dir = os.path.join(args.repo, "data", "src", "test", "resources", "megatron")
    moe_dir = os.path.join(args.repo, "moe", "src", "test", "resources", "megatron")
    os.makedirs(data_dir, exist_ok=True)
    os.makedirs(moe_dir, exist_ok=True)

    def dump(path, value):
        with open(path, "w") as f:
            json.dump(value, f, separators=(",", ":"))
            f.write("\n")
        print("wrote", path, os.path.getsize(path), "bytes")

    if "data" in wanted:
        dump(os.path.join(data_dir, "numpy_random_state.json"), numpy_fixture())
        with tempfile.TemporaryDirectory() as work:
            dump(os.path.join(data_dir, "gpt_indices.json"), gpt_fixture(work))
        with tempfile.TemporaryDirectory() as work:
            dump(os.path.join(data_dir, "splits.json"), splits_fixture(work))
    if "routing" in wanted:
        dump(os.path.join(moe_dir, "routing.json"), routing_fixture())
    if "router" in wanted:
        dump(os.path.join(moe_dir, "router.json"), router_fixture())


if __name__ == "__main__":
    main()
