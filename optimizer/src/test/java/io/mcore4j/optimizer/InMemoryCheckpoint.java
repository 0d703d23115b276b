package io.mcore4j.optimizer;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.shard.ShardedTensor;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A stand-in for a distributed checkpoint: main-replica pieces from every rank are written into
 * whole global tensors (float64 on the Java side), each element at most once, and any rectangle
 * can be read back. Shared by the rank threads of one test.
 */
final class InMemoryCheckpoint {
    private final Map<String, double[]> values = new HashMap<>();
    private final Map<String, int[]> writes = new HashMap<>();
    private final Map<String, long[]> shapes = new HashMap<>();

    synchronized void save(List<ShardedTensor> pieces) {
        for (ShardedTensor t : pieces) {
            if (!t.isMainReplica()) {
                continue;
            }
            long[] global = t.globalShape();
            long[] known = shapes.putIfAbsent(t.key(), global);
            if (known != null && !Arrays.equals(known, global)) {
                throw new AssertionError(t.key() + ": global shape " + Arrays.toString(global) + " vs " + Arrays.toString(known));
            }
            double[] v = values.computeIfAbsent(t.key(), k -> new double[(int) new Shape(global).size()]);
            int[] w = writes.computeIfAbsent(t.key(), k -> new int[v.length]);
            double[] local = t.data().toType(DataType.FLOAT64, false).toDoubleArray();
            int[] index = globalIndices(t);
            for (int i = 0; i < local.length; i++) {
                v[index[i]] = local[i];
                w[index[i]]++;
            }
        }
    }

    /** Fails unless every element of every saved tensor was written by exactly one main replica. */
    synchronized void assertCompleteAndDisjoint() {
        for (Map.Entry<String, int[]> e : writes.entrySet()) {
            int[] w = e.getValue();
            for (int i = 0; i < w.length; i++) {
                if (w[i] != 1) {
                    throw new AssertionError(e.getKey() + " element " + i + " was written " + w[i] + " times");
                }
            }
        }
    }

    /** The saved global tensor of {@code key} in row-major order, or null if nothing was saved under it. */
    synchronized double[] values(String key) {
        double[] v = values.get(key);
        return v == null ? null : v.clone();
    }

    synchronized List<String> keys() {
        return new ArrayList<>(values.keySet());
    }

    /** The pieces {@code wanted} describes, filled from the global tensors, owned by {@code manager}. */
    synchronized List<ShardedTensor> load(List<ShardedTensor> wanted, NDManager manager) {
        List<ShardedTensor> out = new ArrayList<>();
        for (ShardedTensor t : wanted) {
            double[] v = values.get(t.key());
            if (v == null) {
                continue; // a loader returns what it has; the optimizer reports what is missing
            }
            int[] index = globalIndices(t);
            double[] local = new double[index.length];
            for (int i = 0; i < local.length; i++) {
                local[i] = v[index[i]];
            }
            NDArray data = manager.create(local, t.data().getShape()).toType(t.dtype(), false);
            out.add(new ShardedTensor(t.key(), data, t.globalShape(), t.globalOffset(), t.replicaId()));
        }
        return out;
    }

    /** Row-major global index of every local element of a piece. */
    private static int[] globalIndices(ShardedTensor t) {
        long[] local = t.data().getShape().getShape();
        long[] global = t.globalShape();
        long[] offset = t.globalOffset();
        int n = (int) t.data().getShape().size();
        int[] out = new int[n];
        long[] idx = new long[local.length];
        for (int k = 0; k < n; k++) {
            long rem = k;
            for (int d = local.length - 1; d >= 0; d--) {
                idx[d] = rem % local[d];
                rem /= local[d];
            }
            long flat = 0;
            for (int d = 0; d < local.length; d++) {
                flat = flat * global[d] + offset[d] + idx[d];
            }
            out[k] = (int) flat;
        }
        return out;
    }
}
