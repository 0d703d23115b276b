package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.Arrays;
import java.util.List;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The synchronised gradients a CUDA graph holds ({@link DistributedDataParallel#pinSynced()},
 * {@link DistributedDataParallel#restorePinned()}) at DP2: after a step the pinned buffers survive the end of the
 * step, and a later step that ran no Java (a replay, which writes the step's values into the same memory; here
 * written by hand) gets exactly those tensors back as its synchronised gradients, with the overlapped step armed
 * for it disarmed.
 */
class PinnedSyncTest {

    @ParameterizedTest
    @ValueSource(booleans = {false, true})
    void aReplayedStepGetsThePinnedBuffersBack(boolean distributedOptimizer) {
        OptimizerConfig config = OptimizerConfig.builder().useDistributedOptimizer(distributedOptimizer)
                .overlapGradReduce(true).build();
        InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 1));
            NDManager m = rank.manager();
            Parameter w = Parameter.replicated("w", m.create(new float[] {1, 2, 3, 4}));
            DistributedDataParallel ddp = new DistributedDataParallel(List.of(w), groups, config, List.of());
            assertThrows(IllegalStateException.class, ddp::restorePinned, "nothing pinned yet");
            // the captured step: armed, reported, synchronised, pinned
            ddp.expectBackwardPasses(1);
            SplitModel.addGradient(w, new float[] {2 * rank.rank(), 2, 4, 6}, m);
            ddp.gradientsReady(List.of(w));
            ddp.finishGradSync();
            ddp.pinSynced();
            NDArray pinned = ddp.syncedShard(0);
            float[] first = pinned.toFloatArray();
            // the mean over the two ranks, zero-padded to the bucket; with the distributed optimizer this rank's shard
            float[] mean = new float[distributedOptimizer ? 2 * first.length : first.length];
            System.arraycopy(new float[] {1, 2, 4, 6}, 0, mean, 0, 4);
            int from = distributedOptimizer ? rank.rank() * first.length : 0;
            assertArrayEquals(Arrays.copyOfRange(mean, from, from + first.length), first);
            long count = ddp.syncCount();
            ddp.restorePinned(); // the capture's own step: synchronised already
            assertEquals(count, ddp.syncCount());
            ddp.keepGradients();
            assertFalse(ddp.isGradSynced());
            // a replayed step: armed but never reported; the replay rewrites the pinned memory
            ddp.expectBackwardPasses(1);
            float[] replayed = new float[first.length];
            Arrays.fill(replayed, 7 + rank.rank());
            Tensors.copyInto(pinned, m.create(replayed));
            ddp.restorePinned();
            assertTrue(ddp.isGradSynced());
            assertEquals(count + 1, ddp.syncCount());
            assertSame(pinned, ddp.syncedShard(0), "the pinned tensor itself");
            assertArrayEquals(replayed, ddp.syncedShard(0).toFloatArray());
            ddp.zeroGrad();
            assertArrayEquals(replayed, pinned.toFloatArray(), "zeroGrad leaves the pinned buffers alone");
            ddp.close();
            w.close();
            return null;
        });
    }
}
