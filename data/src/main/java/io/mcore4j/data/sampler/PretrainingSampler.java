package io.mcore4j.data.sampler;

import java.util.Iterator;
import java.util.NoSuchElementException;

/**
 * Splits consecutive sample indices among data-parallel ranks, with the semantics of Megatron's
 * {@code MegatronPretrainingSampler}.
 *
 * <p>Starting at {@code consumedSamples}, indices are taken in order in global batches of
 * {@code microBatchSize * dataParallelSize}; rank {@code r} gets the slice
 * {@code [r * microBatchSize, (r + 1) * microBatchSize)} of each. Ranks therefore see disjoint samples, and
 * together they see every index from {@code consumedSamples} on exactly once. A final incomplete global
 * batch is dropped when {@code dropLast}; otherwise each rank gets its part of it, which is shorter or
 * empty for the ranks past its end (so all ranks still take the same number of steps).
 *
 * <p>Resuming: a run that consumed {@code c} samples before stopping continues with a sampler built with
 * {@code consumedSamples = c}, and sees exactly the indices the stopped run would have seen next.
 *
 * @param totalSamples number of samples in the dataset (indices run over {@code [0, totalSamples)})
 * @param consumedSamples samples already consumed by all ranks together; must be below totalSamples
 * @param microBatchSize samples per rank per step
 * @param dataParallelRank this rank, in {@code [0, dataParallelSize)}
 * @param dataParallelSize number of data-parallel ranks
 * @param dropLast whether to drop a final incomplete global batch
 */
public record PretrainingSampler(long totalSamples, long consumedSamples, int microBatchSize, int dataParallelRank,
                                 int dataParallelSize, boolean dropLast) implements Iterable<long[]> {
    /** Validates the arguments. */
    public PretrainingSampler {
        if (totalSamples <= 0) {
            throw new IllegalArgumentException("total samples " + totalSamples + " must be positive");
        }
        if (consumedSamples < 0 || consumedSamples >= totalSamples) {
            throw new IllegalArgumentException("consumed samples " + consumedSamples + " must be in [0, " + totalSamples + ")");
        }
        if (microBatchSize <= 0) {
            throw new IllegalArgumentException("micro batch size " + microBatchSize + " must be positive");
        }
        if (dataParallelSize <= 0) {
            throw new IllegalArgumentException("data parallel size " + dataParallelSize + " must be positive");
        }
        if (dataParallelRank < 0 || dataParallelRank >= dataParallelSize) {
            throw new IllegalArgumentException("data parallel rank " + dataParallelRank + " must be in [0, " + dataParallelSize + ")");
        }
    }

    /**
     * Samples all ranks take together per step.
     *
     * @return {@code microBatchSize * dataParallelSize}
     */
    public long globalMicroBatchSize() {
        return (long) microBatchSize * dataParallelSize;
    }

    /**
     * Number of micro-batches this sampler yields.
     *
     * @return the step count (the same on every rank)
     */
    public long steps() {
        long remaining = totalSamples - consumedSamples;
        long full = remaining / globalMicroBatchSize();
        return full + (!dropLast && remaining % globalMicroBatchSize() != 0 ? 1 : 0);
    }

    /**
     * This rank's sample indices of one step, without iterating.
     *
     * @param step step number in {@code [0, steps())}, counted from {@code consumedSamples}
     * @return the indices (shorter or empty only in a final incomplete batch)
     */
    public long[] microBatch(long step) {
        if (step < 0 || step >= steps()) {
            throw new IndexOutOfBoundsException("step " + step + " is outside [0, " + steps() + ")");
        }
        long batchStart = consumedSamples + step * globalMicroBatchSize();
        long batchEnd = Math.min(totalSamples, batchStart + globalMicroBatchSize());
        long from = Math.min(batchEnd, batchStart + (long) dataParallelRank * microBatchSize);
        long to = Math.min(batchEnd, from + microBatchSize);
        long[] indices = new long[(int) (to - from)];
        for (int k = 0; k < indices.length; k++) {
            indices[k] = from + k;
        }
        return indices;
    }

    /**
     * Iterates this rank's micro-batches in order.
     *
     * @return an iterator of sample-index arrays
     */
    @Override
    public Iterator<long[]> iterator() {
        long steps = steps();
        return new Iterator<>() {
            private long step;

            @Override
            public boolean hasNext() {
                return step < steps;
            }

            @Override
            public long[] next() {
                if (!hasNext()) {
                    throw new NoSuchElementException("sampler is exhausted after " + steps + " steps");
                }
                return microBatch(step++);
            }
        };
    }
}
