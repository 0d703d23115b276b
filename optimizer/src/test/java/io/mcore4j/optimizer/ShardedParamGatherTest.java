package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.kernel.PoisoningStorageResize;
import io.mcore4j.core.kernel.StorageResize;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * ZeRO-3's residency at DP2, three parameters in three buckets read as a model of three recomputed layers
 * reads them (forward 0 1 2, backward 2 1 0): each read sees the whole weights, gathered from the shards;
 * each use leaves the parameter empty; and from the third step on (the first whose predecessor gathered
 * every read: the first step's first read found its bucket whole) each gather starts the next one ahead,
 * as the recorded order says. Both residences: views of each gather, and buffers freed in place.
 */
class ShardedParamGatherTest {
    private static final float[][] VALUES = {{1, 2, 3, 4, 5, 6}, {-1, -2, -3}, {0.5f, 0.25f, 8, 9, 10, 11, 12}};

    @Test
    void eachReadSeesTheGatheredWeightsEachUseReleasesThemAndLaterStepsPrefetch() {
        readsUsesAndPrefetches(null);
    }

    /**
     * The same with the weights freed in place ({@link PoisoningStorageResize} standing in for the native
     * library): a release leaves each parameter its shape and identity and its memory NaN, and tells the model
     * that graphs which saved the parameters stay valid.
     */
    @Test
    void inPlaceTheParametersKeepTheirShapeAndAReleaseLeavesNothingReadable() {
        readsUsesAndPrefetches(new PoisoningStorageResize());
    }

    private static void readsUsesAndPrefetches(StorageResize resize) {
        List<long[]> counts = InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 1, 1));
            NDManager m = rank.manager();
            List<Parameter> params = new ArrayList<>();
            for (float[] v : VALUES) {
                params.add(Parameter.replicated("w", m.create(v, new Shape(v.length))));
            }
            OptimizerConfig config = OptimizerConfig.builder().useDistributedOptimizer(true).bucketSizeBytes(1)
                    .dataParallelShardingStrategy(DataParallelShardingStrategy.OPTIM_GRADS_PARAMS).build();
            List<GradientBucket> buckets = GradientBucket.plan(params, groups, config, p -> false);
            assertEquals(3, buckets.size(), "one parameter per bucket");
            // the shards a master would hold: the bucket's flat values, zero padded, this rank's range
            ShardedParamGather gather = new ShardedParamGather(buckets, (bucket, owner) -> {
                float[] flat = new float[(int) bucket.paddedNumel];
                for (GradientBucket.Slot slot : bucket.slots) {
                    float[] v = VALUES[params.indexOf(slot.param())];
                    System.arraycopy(v, 0, flat, (int) slot.offset(), v.length);
                }
                float[] shard = new float[(int) bucket.shardNumel];
                System.arraycopy(flat, (int) bucket.shardOffset, shard, 0, shard.length);
                return owner.create(shard);
            }, m, resize);
            assertEquals(resize != null, gather.keepsSavedTensors());
            List<NDArray> handles = params.stream().map(Parameter::data).toList();
            long[] prefetchesAfterStep = new long[4];
            for (int step = 0; step < 4; step++) {
                gather.beforeStep();
                for (int i : new int[] {0, 1, 2, 2, 1, 0}) {
                    Parameter p = params.get(i);
                    gather.beforeForward(List.of(p));
                    assertArrayEquals(VALUES[i], p.data().toFloatArray(), "step " + step + ", parameter " + i);
                    gather.afterUse(List.of(p));
                    if (resize == null) {
                        assertEquals(0, p.data().size(), "released after its use");
                    } else {
                        assertSame(handles.get(i), p.data(), "the same tensor");
                        assertEquals(new Shape(VALUES[i].length), p.data().getShape(), "its shape kept");
                        for (float x : p.data().toFloatArray()) {
                            assertTrue(Float.isNaN(x), "released after its use: step " + step + ", parameter " + i);
                        }
                    }
                }
                prefetchesAfterStep[step] = gather.prefetches();
            }
            gather.finish();
            for (int i = 0; i < VALUES.length; i++) {
                assertArrayEquals(VALUES[i], params.get(i).data().toFloatArray(), "finish gathers every bucket");
            }
            return new long[] {gather.gathers(), prefetchesAfterStep[1], prefetchesAfterStep[2], prefetchesAfterStep[3]};
        });
        for (long[] c : counts) {
            // step 1 gathers five (the weights start whole: its first read keeps its own and releases the others),
            // later steps six, finish three
            assertEquals(5 + 6 * 3 + 3, c[0], "gathers");
            assertEquals(0, c[1], "step 2 follows no recorded order: step 1 gathered in another");
            // per step: 1 and 2 ahead in forward, 1 and 0 ahead in backward (after 2, the recorded next is 2 itself, held)
            assertEquals(4, c[2], "prefetches by step 3");
            assertEquals(8, c[3], "prefetches by step 4");
        }
    }
}
