package io.mcore4j.training.gpt;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.contextparallel.ContextParallelSplit;
import io.mcore4j.core.PackedSequences;
import io.mcore4j.core.Tensors;
import io.mcore4j.data.gpt.MaskedSampleDataset;
import io.mcore4j.data.gpt.PackedSampleDataset;
import io.mcore4j.data.gpt.SampleDataset;
import io.mcore4j.data.sampler.CyclicPretrainingSampler;
import io.mcore4j.data.sampler.DataloaderType;
import io.mcore4j.training.BatchSource;
import io.mcore4j.training.MicroBatch;

import java.util.Arrays;
import java.util.Objects;

/**
 * Micro-batches of GPT samples for one data-parallel rank, taken in order as Megatron's
 * pretraining sampler takes them (wrapping around the dataset), or with {@link DataloaderType#CYCLIC} in the
 * random order of {@link CyclicPretrainingSampler}: each sample of {@code s + 1} tokens gives
 * tokens {@code [0, s)} and labels {@code [1, s + 1)}, laid out {@code [s, b]}, with the labels' loss mask
 * when the samples have one ({@link MaskedSampleDataset}, supervised fine-tuning); under context
 * parallelism, this rank's {@code [s / CP, b]} part of them. With {@link DocumentMasking} flags the
 * end-of-document tokens of each window reset its position ids, separate its documents as packed
 * sequences, or mask their losses (as well as the samples' own mask). Rows of packed sequences
 * ({@link PackedSampleDataset}, supervised fine-tuning with packing) give micro-batches of
 * {@link MicroBatch#ofPacked}: their own labels, positions restarting at each sequence, and under context
 * parallelism each sequence split when {@code 2·CP} divides every length.
 */
public final class GptBatches implements BatchSource {
    private final SampleDataset data;
    private final int microBatchSize;
    private final int dataParallelRank;
    private final int dataParallelSize;
    private final ContextParallelSplit contextParallel;
    private final CyclicPretrainingSampler cyclic;
    private final DocumentMasking masking;

    /**
     * Micro-batches of whole sequences (no context parallelism).
     *
     * @param data the samples
     * @param microBatchSize samples per micro-batch
     * @param dataParallelRank this rank's data-parallel index
     * @param dataParallelSize the data-parallel size
     */
    public GptBatches(SampleDataset data, int microBatchSize, int dataParallelRank, int dataParallelSize) {
        this(data, microBatchSize, dataParallelRank, dataParallelSize, new ContextParallelSplit(1, 0));
    }

    /**
     * Micro-batches of this context-parallel rank's part of each sequence: the ranks of one
     * context-parallel group read the same samples and keep their chunks of them.
     *
     * @param data the samples
     * @param microBatchSize samples per micro-batch
     * @param dataParallelRank this rank's data-parallel index
     * @param dataParallelSize the data-parallel size
     * @param contextParallel this rank's split of each sequence
     * @throws IllegalArgumentException if the samples' length cannot be split
     */
    public GptBatches(SampleDataset data, int microBatchSize, int dataParallelRank, int dataParallelSize,
                      ContextParallelSplit contextParallel) {
        this(data, microBatchSize, dataParallelRank, dataParallelSize, contextParallel, DataloaderType.SINGLE);
    }

    /**
     * Micro-batches of this context-parallel rank's part of each sequence, read in the given order.
     *
     * @param data the samples
     * @param microBatchSize samples per micro-batch
     * @param dataParallelRank this rank's data-parallel index
     * @param dataParallelSize the data-parallel size
     * @param contextParallel this rank's split of each sequence
     * @param order in order ({@link DataloaderType#SINGLE}) or shuffled per epoch ({@link DataloaderType#CYCLIC})
     * @throws IllegalArgumentException if the samples' length cannot be split, or (cyclic) the
     *         dataset does not fill one micro-batch on every data-parallel rank
     */
    public GptBatches(SampleDataset data, int microBatchSize, int dataParallelRank, int dataParallelSize,
                      ContextParallelSplit contextParallel, DataloaderType order) {
        this(data, microBatchSize, dataParallelRank, dataParallelSize, contextParallel, order, DocumentMasking.NONE);
    }

    /**
     * Micro-batches read in the given order whose end-of-document tokens act as {@code masking} says.
     *
     * @param data the samples
     * @param microBatchSize samples per micro-batch
     * @param dataParallelRank this rank's data-parallel index
     * @param dataParallelSize the data-parallel size
     * @param contextParallel this rank's split of each sequence
     * @param order in order ({@link DataloaderType#SINGLE}) or shuffled per epoch ({@link DataloaderType#CYCLIC})
     * @param masking Megatron's {@code --reset-position-ids}, {@code --reset-attention-mask} and {@code --eod-mask-loss}
     * @throws IllegalArgumentException if the samples' length cannot be split, (cyclic) the
     *         dataset does not fill one micro-batch on every data-parallel rank, or the samples are
     *         packed rows ({@link PackedSampleDataset}) and {@code masking} resets positions or attention
     *         at end-of-document tokens (the rows say where their sequences start)
     */
    public GptBatches(SampleDataset data, int microBatchSize, int dataParallelRank, int dataParallelSize,
                      ContextParallelSplit contextParallel, DataloaderType order, DocumentMasking masking) {
        if (data instanceof PackedSampleDataset && (masking.resetPositionIds() || masking.resetAttentionMask())) {
            throw new IllegalArgumentException("packed samples restart the positions and the attention at every sequence"
                    + " already: drop --reset-position-ids and --reset-attention-mask");
        }
        this.masking = Objects.requireNonNull(masking, "masking");
        this.data = Objects.requireNonNull(data, "data");
        this.microBatchSize = microBatchSize;
        this.dataParallelRank = dataParallelRank;
        this.dataParallelSize = dataParallelSize;
        this.contextParallel = Objects.requireNonNull(contextParallel, "contextParallel");
        contextParallel.checkSequenceLength(data.sequenceLength());
        this.cyclic = Objects.requireNonNull(order, "order") == DataloaderType.CYCLIC
                ? new CyclicPretrainingSampler(data.size(), microBatchSize, dataParallelRank, dataParallelSize) : null;
    }

    @Override
    public MicroBatch microBatch(NDManager manager, long consumedSamples, int microBatch) {
        long[] indices;
        if (cyclic != null) {
            indices = cyclic.microBatch(consumedSamples + (long) microBatch * microBatchSize * dataParallelSize);
        } else {
            // Megatron's pretraining order, sample i of the run being sample i mod size of the data (its SFT
            // dataset's wrap): a dataset smaller than the run, a few conversations, is read again from its start
            long first = consumedSamples + ((long) microBatch * dataParallelSize + dataParallelRank) * microBatchSize;
            indices = new long[microBatchSize];
            for (int j = 0; j < microBatchSize; j++) {
                indices[j] = (first + j) % data.size();
            }
        }
        int seq = data.sequenceLength();
        int width = seq + 1;
        int[] flat = rows(indices, width, data::sample);
        // queued without a host wait on a GPU (a pageable copy would wait for the previous step's kernels)
        NDArray batch = Tensors.fromHost(flat, new Shape(indices.length, width), manager).toType(DataType.INT64, false);
        NDArray tokens = batch.get(new ai.djl.ndarray.index.NDIndex().addAllDim().addSliceDim(0, seq)).transpose(1, 0);
        // the samples' own loss mask (supervised fine-tuning), float32 [s, b] as the labels
        NDArray samplesMask = data instanceof MaskedSampleDataset masked
                ? sequenceMajor(rows(indices, seq, masked::lossMask), indices.length, DataType.FLOAT32, manager) : null;
        int[][] inputs = masking.any() ? inputs(flat, indices.length, width) : null;
        if (masking.eodMaskLoss()) {
            NDArray eodMask = eodLossMask(inputs, manager);
            samplesMask = samplesMask == null ? eodMask : samplesMask.mul(eodMask);
        }
        if (data instanceof PackedSampleDataset packedRows) {
            NDArray labels = sequenceMajor(rows(indices, seq, packedRows::labels), indices.length, DataType.INT64, manager);
            int[][] lengths = new int[indices.length][];
            for (int i = 0; i < indices.length; i++) {
                lengths[i] = packedRows.sequenceLengths(indices[i]);
            }
            return MicroBatch.ofPacked(manager, PackedSequences.ofLengths(lengths), tokens, labels, samplesMask,
                    contextParallel);
        }
        NDArray labels = batch.get(new ai.djl.ndarray.index.NDIndex().addAllDim().addSliceDim(1, width)).transpose(1, 0);
        if (!masking.resetPositionIds() && !masking.resetAttentionMask()) {
            if (contextParallel.size() > 1) {
                tokens = contextParallel.split(tokens, 0, manager);
                labels = contextParallel.split(labels, 0, manager);
                samplesMask = samplesMask == null ? null : contextParallel.split(samplesMask, 0, manager);
            }
            return new MicroBatch(tokens, labels, samplesMask);
        }
        PackedSequences documents = PackedSequences.ofDocuments(masking.eod(), inputs);
        PackedSequences packed = masking.resetAttentionMask() ? documents : null;
        NDArray positions = masking.resetPositionIds() ? documents.positionIds(manager) : null;
        NDArray lossMask = samplesMask;
        if (contextParallel.size() > 1) {
            tokens = contextParallel.split(tokens, packed, manager);
            labels = contextParallel.split(labels, packed, manager);
            positions = positions == null ? null : contextParallel.split(positions, packed, manager);
            lossMask = lossMask == null ? null : contextParallel.split(lossMask, packed, manager);
        }
        return new MicroBatch(tokens, labels, lossMask, positions, packed);
    }

    /** {@code [s, b]} of the given type from {@code b} rows of {@code s} values, row-major. */
    private static NDArray sequenceMajor(int[] rows, int b, DataType type, NDManager manager) {
        return Tensors.fromHost(rows, new Shape(b, rows.length / b), manager).toType(type, false).transpose(1, 0);
    }

    /** The input tokens of each sample, {@code [b][s]}. */
    private static int[][] inputs(int[] flat, int b, int width) {
        int[][] inputs = new int[b][];
        for (int i = 0; i < b; i++) {
            inputs[i] = Arrays.copyOfRange(flat, i * width, i * width + width - 1);
        }
        return inputs;
    }

    /** float32 {@code [s, b]}: 0 where the input token is the end of a document, 1 elsewhere. */
    private NDArray eodLossMask(int[][] inputs, NDManager manager) {
        int b = inputs.length;
        int seq = inputs[0].length;
        float[] mask = new float[seq * b];
        for (int c = 0; c < b; c++) {
            for (int t = 0; t < seq; t++) {
                mask[t * b + c] = inputs[c][t] == masking.eod() ? 0f : 1f;
            }
        }
        return manager.create(mask, new Shape(seq, b));
    }

    /** Reads one row of a sample (its tokens, or its loss mask) into an array. */
    @FunctionalInterface
    private interface RowReader {
        void read(long index, int[] destination);
    }

    /** The rows of the given samples, {@code [indices, width]} row-major. */
    private static int[] rows(long[] indices, int width, RowReader reader) {
        int[] flat = new int[indices.length * width];
        int[] one = new int[width];
        for (int i = 0; i < indices.length; i++) {
            reader.read(indices[i], one);
            System.arraycopy(one, 0, flat, i * width, width);
        }
        return flat;
    }
}
