package io.mcore4j.samples.pretrain;

import static io.mcore4j.samples.pretrain.PretrainRuns.assertSameLosses;
import static io.mcore4j.samples.pretrain.PretrainRuns.train;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * pretrain-gpt with {@code --context-parallel-size}, as a user runs it: a small GPT with GQA and
 * RoPE trained at CP2 and CP4 (with the fused attention's ring and with the composed attention), alone and with TP2 (and sequence parallelism), PP2 and DP2 (with the
 * distributed optimizer), gives the serial losses; a checkpoint written at CP2 resumes at CP1 and
 * at CP4 with the losses of the uninterrupted run; a sequence length the split cannot cut is
 * refused naming the flags; {@code --cp-comm-type a2a+p2p} at CP4 as 2 x 2 gives the serial losses too, and its
 * sizes are checked naming the flags.
 */
class PretrainGptContextParallelTest {
    @TempDir
    Path dir;

    private List<String> common(int nproc, int steps, String... more) {
        List<String> flags = new ArrayList<>(List.of("--nproc", String.valueOf(nproc), "--num-layers", "2",
                "--hidden-size", "32", "--num-attention-heads", "4", "--num-query-groups", "2",
                "--position-embedding-type", "rope", "--seq-length", "16", "--micro-batch-size", "2",
                "--global-batch-size", "4", "--lr", "1e-3", "--min-lr", "1e-4", "--lr-warmup-iters", "2",
                "--lr-decay-iters", "10", "--train-iters", String.valueOf(steps), "--mock-data", "--vocab-size", "250",
                "--make-vocab-size-divisible-by", "64", "--log-interval", "5", "--seed", "7", "--clip-grad", "1.0",
                "--metrics-dir", dir.resolve("metrics-" + System.nanoTime()).toString()));
        flags.addAll(List.of(more));
        return flags;
    }

    @Test
    void contextParallelLayoutsGiveTheSerialLosses() throws Exception {
        List<Double> serial = train(common(1, 8));
        assertTrue(serial.get(7) < serial.get(0), "the loss should fall: " + serial);
        assertSameLosses(serial, train(common(2, 8, "--context-parallel-size", "2")), "CP2 p2p");
        assertSameLosses(serial, train(common(4, 8, "--context-parallel-size", "4", "--cp-comm-type", "allgather")),
                "CP4 allgather");
        assertSameLosses(serial, train(common(4, 8, "--context-parallel-size", "2", "--tensor-model-parallel-size", "2",
                "--sequence-parallel")), "TP2 SP CP2");
        assertSameLosses(serial, train(common(4, 8, "--context-parallel-size", "2", "--pipeline-model-parallel-size", "2")),
                "PP2 CP2");
        assertSameLosses(serial, train(common(4, 8, "--context-parallel-size", "2", "--use-distributed-optimizer",
                "--overlap-grad-reduce", "--ddp-bucket-size", "2000")), "DP2 CP2 + distributed optimizer, overlapped");
    }

    /**
     * The fused attention under CP (ring attention on libtorch's flash kernels, which {@code auto}
     * picks for {@code p2p}; the fused attention between all-to-alls for {@code a2a}; the ring between
     * all-to-alls for {@code a2a+p2p}) and the composed one give the serial composed attention's losses.
     */
    @Test
    void fusedAndComposedAttentionUnderContextParallelismGiveTheSerialLosses() throws Exception {
        List<Double> serial = train(common(1, 8, "--attention-backend", "unfused"));
        assertSameLosses(serial, train(common(2, 8, "--context-parallel-size", "2", "--attention-backend", "flash")), "CP2 flash");
        assertSameLosses(serial, train(common(4, 8, "--context-parallel-size", "4", "--attention-backend", "fused")), "CP4 fused");
        assertSameLosses(serial, train(common(2, 8, "--context-parallel-size", "2", "--attention-backend", "unfused")),
                "CP2 unfused p2p");
        assertSameLosses(serial, train(common(2, 8, "--context-parallel-size", "2", "--cp-comm-type", "a2a")), "CP2 a2a auto");
        assertSameLosses(serial, train(common(4, 8, "--context-parallel-size", "2", "--tensor-model-parallel-size", "2",
                "--cp-comm-type", "a2a", "--attention-backend", "unfused")), "TP2 CP2 a2a unfused");
        assertSameLosses(serial, train(common(4, 8, "--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p",
                "--hierarchical-context-parallel-sizes", "2", "2")), "CP4 a2a+p2p 2x2 auto");
    }

    /** Mixture-of-experts layers under context parallelism: the router's load-balancing statistics span the group. */
    @Test
    void expertLayersWithContextParallelismGiveTheSerialLosses() throws Exception {
        String[] moe = {"--num-experts", "4", "--moe-router-topk", "2", "--moe-aux-loss-coeff", "0.01"};
        List<Double> serial = train(common(1, 6, moe));
        List<String> cp2ep2 = common(4, 6, moe);
        cp2ep2.addAll(List.of("--context-parallel-size", "2", "--expert-model-parallel-size", "2"));
        assertSameLosses(serial, train(cp2ep2), "CP2 DP2 EP2");
    }

    /**
     * A checkpoint written at CP2 x DP2 with the distributed optimizer (model and optimizer state,
     * the latter sharded over the four dp-cp ranks) resumes at CP1 x DP4 and at CP4 x DP1 with the
     * losses of the uninterrupted run (the serial run's, which every layout reproduces).
     */
    @Test
    void aCheckpointWrittenAtCp2ResumesAtCp1AndCp4() throws Exception {
        Path save = dir.resolve("cp2");
        // one sample per micro-batch, so that the global batch of 4 divides among four data-parallel ranks at CP1
        List<Double> uninterrupted = train(common(1, 8, "--micro-batch-size", "1"));
        List<Double> head = train(common(4, 4, "--context-parallel-size", "2", "--use-distributed-optimizer",
                "--micro-batch-size", "1", "--save", save.toString()));
        assertSameLosses(uninterrupted.subList(0, 4), head, "CP2 DP2 before the checkpoint");
        for (String cp : List.of("1", "4")) {
            List<Double> resumed = train(common(4, 8, "--context-parallel-size", cp, "--use-distributed-optimizer",
                    "--micro-batch-size", "1", "--load", save.toString()));
            assertSameLosses(uninterrupted.subList(4, 8), resumed, "saved at CP2 DP2, resumed at CP" + cp);
        }
    }

    @Test
    void aSequenceTheSplitCannotCutIsNamed() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> PretrainArgs.parse(common(4, 1, "--context-parallel-size", "4", "--seq-length", "12")
                        .toArray(String[]::new)).setup());
        assertEquals("--seq-length 12 is not divisible by 2 x --context-parallel-size 4 = 8 (the load-balanced causal"
                + " split cuts each sequence into 2·CP equal chunks)", e.getMessage());
    }

    /** a2a+p2p's sizes: required, multiplying to the CP size, the first dividing the heads of a tensor-parallel rank. */
    @Test
    void hierarchicalSizesAreCheckedNamingTheFlags() {
        assertEquals("model flags: --cp-comm-type a2a+p2p needs two --hierarchical-context-parallel-sizes (the a2a group's"
                + " size, then the p2p ring's, multiplying to --context-parallel-size); got none",
                refusal(common(4, 1, "--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p")));
        assertEquals("--hierarchical-context-parallel-sizes 2 3 multiply to 6, not --context-parallel-size 4",
                refusal(common(4, 1, "--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p",
                        "--hierarchical-context-parallel-sizes", "2", "3")));
        assertEquals("--cp-comm-type a2a+p2p scatters the attention heads over the a2a group: 2 heads per tensor-parallel"
                + " rank (4 / --tensor-model-parallel-size 2) are not divisible by its size 4 (the first of"
                + " --hierarchical-context-parallel-sizes 4 1)",
                refusal(common(8, 1, "--context-parallel-size", "4", "--tensor-model-parallel-size", "2",
                        "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "4", "1")));
    }

    private static String refusal(List<String> flags) {
        return assertThrows(IllegalArgumentException.class, () -> PretrainArgs.parse(flags.toArray(String[]::new)).setup())
                .getMessage();
    }
}
