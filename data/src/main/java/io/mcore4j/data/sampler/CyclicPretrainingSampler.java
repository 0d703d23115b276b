package io.mcore4j.data.sampler;

import java.util.SplittableRandom;

/**
 * Random sampling that cycles epochs, with the semantics of Megatron's
 * {@code MegatronPretrainingRandomSampler} with data sharding ({@code --dataloader-type cyclic}).
 *
 * <p>The dataset's first {@code active = totalSamples - totalSamples % (microBatchSize * dataParallelSize)}
 * samples are cut into one contiguous bucket of {@code active / dataParallelSize} samples per
 * data-parallel rank; each epoch, every rank reads its own bucket in a fresh random order (the
 * permutation depends on the epoch number only, as in Megatron), one micro-batch of
 * {@code microBatchSize} indices per step. After {@code active} samples of all ranks together the next
 * epoch starts, so the sampler never runs out. The random order is this class's own, not PyTorch's:
 * the same epoch gives the same indices on every run, but not the indices Megatron would read.
 *
 * <p>Resuming: the micro-batch of a step is a function of the samples consumed before it, so a run
 * resumed at {@code c} consumed samples reads what the stopped run would have read next.
 *
 * <p>Not thread-safe: an instance keeps the permutation of the epoch it read last.
 */
public final class CyclicPretrainingSampler {
    private final long totalSamples;
    private final int microBatchSize;
    private final int dataParallelRank;
    private final int dataParallelSize;
    private final int bucketSize;
    private long cachedEpoch = -1;
    private int[] cachedOrder;

    /**
     * @param totalSamples samples in the dataset (indices run over {@code [0, totalSamples)})
     * @param microBatchSize samples per rank per step
     * @param dataParallelRank this rank, in {@code [0, dataParallelSize)}
     * @param dataParallelSize number of data-parallel ranks
     * @throws IllegalArgumentException if a count is not positive, the rank is out of range, or the
     *         dataset holds fewer than {@code microBatchSize * dataParallelSize} samples
     */
    public CyclicPretrainingSampler(long totalSamples, int microBatchSize, int dataParallelRank, int dataParallelSize) {
        if (microBatchSize <= 0 || dataParallelSize <= 0) {
            throw new IllegalArgumentException("micro batch size " + microBatchSize + " and data parallel size "
                    + dataParallelSize + " must be positive");
        }
        if (dataParallelRank < 0 || dataParallelRank >= dataParallelSize) {
            throw new IllegalArgumentException("data parallel rank " + dataParallelRank + " must be in [0, " + dataParallelSize + ")");
        }
        long globalMicroBatch = (long) microBatchSize * dataParallelSize;
        if (totalSamples < globalMicroBatch) {
            throw new IllegalArgumentException("--dataloader-type cyclic: the dataset's " + totalSamples
                    + " samples do not fill one micro-batch on every data-parallel rank (" + microBatchSize + " x "
                    + dataParallelSize + ")");
        }
        long bucket = (totalSamples / globalMicroBatch) * microBatchSize;
        if (bucket > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("--dataloader-type cyclic: " + bucket + " samples per data-parallel rank"
                    + " exceed " + Integer.MAX_VALUE);
        }
        this.totalSamples = totalSamples;
        this.microBatchSize = microBatchSize;
        this.dataParallelRank = dataParallelRank;
        this.dataParallelSize = dataParallelSize;
        this.bucketSize = (int) bucket;
    }

    /** @return samples of all ranks together per epoch: {@code totalSamples} less a final incomplete global micro-batch */
    public long samplesPerEpoch() {
        return (long) bucketSize * dataParallelSize;
    }

    /**
     * This rank's sample indices of the step that starts after {@code consumedSamples} samples of
     * all ranks together.
     *
     * @param consumedSamples samples consumed before the step, a multiple of {@code microBatchSize * dataParallelSize}
     * @return {@code microBatchSize} indices from this rank's bucket
     * @throws IllegalArgumentException if {@code consumedSamples} is negative or not such a multiple
     */
    public long[] microBatch(long consumedSamples) {
        long globalMicroBatch = (long) microBatchSize * dataParallelSize;
        if (consumedSamples < 0 || consumedSamples % globalMicroBatch != 0) {
            throw new IllegalArgumentException("consumed samples " + consumedSamples + " must be a non-negative multiple of "
                    + globalMicroBatch);
        }
        long epoch = consumedSamples / samplesPerEpoch();
        int offset = (int) ((consumedSamples % samplesPerEpoch()) / dataParallelSize);
        int[] order = order(epoch);
        long start = (long) dataParallelRank * bucketSize;
        long[] indices = new long[microBatchSize];
        for (int k = 0; k < microBatchSize; k++) {
            indices[k] = start + order[offset + k];
        }
        return indices;
    }

    /** The bucket's order in an epoch: a Fisher-Yates shuffle seeded with the epoch number. */
    private int[] order(long epoch) {
        if (epoch != cachedEpoch) {
            int[] order = new int[bucketSize];
            for (int i = 0; i < bucketSize; i++) {
                order[i] = i;
            }
            SplittableRandom random = new SplittableRandom(epoch);
            for (int i = bucketSize - 1; i > 0; i--) {
                int j = random.nextInt(i + 1);
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
            cachedOrder = order;
            cachedEpoch = epoch;
        }
        return cachedOrder;
    }

    @Override
    public String toString() {
        return "CyclicPretrainingSampler[totalSamples=" + totalSamples + ", microBatchSize=" + microBatchSize
                + ", dataParallelRank=" + dataParallelRank + ", dataParallelSize=" + dataParallelSize + "]";
    }
}
