package io.mcore4j.training.gpt;

import io.mcore4j.contextparallel.CpCommType;
import io.mcore4j.data.sampler.DataloaderType;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.AttentionBackend;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.LoraConfig;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.training.CudaGraphConfig;
import io.mcore4j.training.TrainingConfig;

import java.util.Objects;

/**
 * Everything that defines a GPT training run apart from its data and ranks: the typed values the
 * flags of {@code pretrain-gpt} and the benchmark map onto, validated together.
 *
 * @param model the transformer's shape, precision and recompute policy
 * @param attention the core attention kind
 * @param tensorParallel tensor-parallel size
 * @param pipelineParallel pipeline-parallel size
 * @param virtualStages model chunks per pipeline rank (1 without interleaving)
 * @param expertParallel expert-parallel size
 * @param contextParallel context-parallel size: each sequence is split over this many ranks
 *                        ({@link io.mcore4j.contextparallel.ContextParallelSplit}; the attention's
 *                        exchange is the model's {@code cpCommType}, whose hierarchical levels, if any,
 *                        the layout's groups follow)
 * @param optimizer optimizer, precision and gradient-reduction settings
 * @param microBatchSize samples per micro-batch
 * @param globalBatchSize samples per iteration, all data-parallel ranks together
 * @param seqLength tokens per sample
 * @param training iterations, schedule, intervals, checkpoints
 * @param seed base seed of the weights and of dropout
 * @param deviceInitialization initialise weights on the training device (fast on GPUs; same values
 *                             only up to the device's random generator), instead of on the CPU
 * @param dataloaderType the order training samples are read in (Megatron's {@code --dataloader-type})
 * @param cudaGraph whether steps replay their forward-backward from a CUDA graph after a warm-up
 * @param lora LoRA adapters on the layers' linears, the base weights frozen; null to train every weight
 * @param documentMasking what the end-of-document tokens of the samples do ({@code --reset-position-ids},
 *                        {@code --reset-attention-mask}, {@code --eod-mask-loss})
 * @param packedSamples the samples are rows of whole sequences packed by the data
 *                      ({@link io.mcore4j.data.gpt.PackedSampleDataset}, {@code --sft --packing}): the model reads
 *                      each micro-batch's sequences apart, as with {@code --reset-attention-mask}
 */
public record GptTrainingSetup(TransformerConfig model, AttentionBackend attention, int tensorParallel,
                               int pipelineParallel, int virtualStages, int expertParallel, int contextParallel,
                               OptimizerConfig optimizer,
                               int microBatchSize, long globalBatchSize, int seqLength, TrainingConfig training,
                               long seed, boolean deviceInitialization, DataloaderType dataloaderType,
                               CudaGraphConfig cudaGraph, LoraConfig lora, DocumentMasking documentMasking,
                               boolean packedSamples) {

    /** Checks what can be checked without knowing the world size. */
    public GptTrainingSetup {
        Objects.requireNonNull(model, "model");
        Objects.requireNonNull(attention, "attention");
        Objects.requireNonNull(optimizer, "optimizer");
        Objects.requireNonNull(training, "training");
        Objects.requireNonNull(dataloaderType, "dataloaderType");
        Objects.requireNonNull(cudaGraph, "cudaGraph");
        Objects.requireNonNull(documentMasking, "documentMasking");
        positive("--tensor-model-parallel-size", tensorParallel);
        positive("--pipeline-model-parallel-size", pipelineParallel);
        positive("virtual pipeline stages", virtualStages);
        positive("--expert-model-parallel-size", expertParallel);
        positive("--context-parallel-size", contextParallel);
        positive("--micro-batch-size", microBatchSize);
        positive("--seq-length", seqLength);
        if (globalBatchSize < 1) {
            throw new IllegalArgumentException("--global-batch-size " + globalBatchSize + " must be at least 1");
        }
        if (seqLength > model.maxSequenceLength()) {
            throw new IllegalArgumentException("--seq-length " + seqLength + " exceeds --max-position-embeddings "
                    + model.maxSequenceLength());
        }
        if (contextParallel > 1 && seqLength % (2L * contextParallel) != 0) {
            throw new IllegalArgumentException("--seq-length " + seqLength + " is not divisible by 2 x --context-parallel-size "
                    + contextParallel + " = " + 2L * contextParallel
                    + " (the load-balanced causal split cuts each sequence into 2·CP equal chunks)");
        }
        model.validateContextParallel(tensorParallel, contextParallel); // a2a+p2p's levels against CP and the heads
        attention.layerSpec(model); // refuses a fused kind with attention dropout
        if (packedSamples && (documentMasking.resetAttentionMask() || documentMasking.resetPositionIds())) {
            throw new IllegalArgumentException("--packing restarts the positions and the attention at every conversation"
                    + " already: drop " + (documentMasking.resetAttentionMask() ? "--reset-attention-mask" : "--reset-position-ids"));
        }
        if (packedSamples || documentMasking.resetAttentionMask()) { // packedSequences(), before the fields are set
            String flag = packedSamples ? "--packing" : "--reset-attention-mask";
            attention.checkPacked(model, contextParallel);
            if (cudaGraph.enabled()) {
                throw new IllegalArgumentException(flag + " gives every micro-batch its own " + (packedSamples
                        ? "conversations'" : "documents'") + " attention; a CUDA graph replays one fixed attention: drop"
                        + " --cuda-graph-impl local");
            }
        }
        boolean allToAll = model.cpCommType() == CpCommType.A2A || model.cpCommType() == CpCommType.A2A_P2P
                && model.hierarchicalContextParallelSizes().get(0) > 1;
        if (packedSamples && contextParallel > 1 && allToAll) {
            // fine-tuning data pads every conversation to a multiple of 2·CP, so it is always split per sequence
            throw new IllegalArgumentException("--cp-comm-type " + model.cpCommType().flag() + " gathers whole columns in"
                    + " position order; --packing pads every conversation to a multiple of 2 x --context-parallel-size and"
                    + " splits it per sequence: use --cp-comm-type p2p or allgather");
        }
        if (lora != null && model.moe() != null) {
            throw new IllegalArgumentException("LoRA adapters wrap the dense layers' linears; this model has"
                    + " mixture-of-experts layers (expert adapters are not supported)");
        }
    }

    /**
     * A setup of one sequence per sample, unless {@code documentMasking} packs documents; the parameters are
     * the canonical constructor's.
     */
    public GptTrainingSetup(TransformerConfig model, AttentionBackend attention, int tensorParallel,
                            int pipelineParallel, int virtualStages, int expertParallel, int contextParallel,
                            OptimizerConfig optimizer, int microBatchSize, long globalBatchSize, int seqLength,
                            TrainingConfig training, long seed, boolean deviceInitialization, DataloaderType dataloaderType,
                            CudaGraphConfig cudaGraph, LoraConfig lora, DocumentMasking documentMasking) {
        this(model, attention, tensorParallel, pipelineParallel, virtualStages, expertParallel, contextParallel, optimizer,
                microBatchSize, globalBatchSize, seqLength, training, seed, deviceInitialization, dataloaderType,
                cudaGraph, lora, documentMasking, false);
    }

    /**
     * A setup whose end-of-document tokens are ordinary tokens ({@link DocumentMasking#NONE}); the
     * parameters are the canonical constructor's.
     */
    public GptTrainingSetup(TransformerConfig model, AttentionBackend attention, int tensorParallel,
                            int pipelineParallel, int virtualStages, int expertParallel, int contextParallel,
                            OptimizerConfig optimizer, int microBatchSize, long globalBatchSize, int seqLength,
                            TrainingConfig training, long seed, boolean deviceInitialization, DataloaderType dataloaderType,
                            CudaGraphConfig cudaGraph, LoraConfig lora) {
        this(model, attention, tensorParallel, pipelineParallel, virtualStages, expertParallel, contextParallel, optimizer,
                microBatchSize, globalBatchSize, seqLength, training, seed, deviceInitialization, dataloaderType,
                cudaGraph, lora, DocumentMasking.NONE);
    }

    /**
     * A setup without LoRA; the parameters are the canonical constructor's.
     */
    public GptTrainingSetup(TransformerConfig model, AttentionBackend attention, int tensorParallel,
                            int pipelineParallel, int virtualStages, int expertParallel, int contextParallel,
                            OptimizerConfig optimizer, int microBatchSize, long globalBatchSize, int seqLength,
                            TrainingConfig training, long seed, boolean deviceInitialization, DataloaderType dataloaderType,
                            CudaGraphConfig cudaGraph) {
        this(model, attention, tensorParallel, pipelineParallel, virtualStages, expertParallel, contextParallel, optimizer,
                microBatchSize, globalBatchSize, seqLength, training, seed, deviceInitialization, dataloaderType,
                cudaGraph, null);
    }

    /**
     * @param value LoRA's settings, or null for none
     * @return the same setup with them
     */
    public GptTrainingSetup withLora(LoraConfig value) {
        return new GptTrainingSetup(model, attention, tensorParallel, pipelineParallel, virtualStages, expertParallel,
                contextParallel, optimizer, microBatchSize, globalBatchSize, seqLength, training, seed,
                deviceInitialization, dataloaderType, cudaGraph, value, documentMasking, packedSamples);
    }

    /**
     * @param value what the end-of-document tokens of the samples do
     * @return the same setup with it
     */
    public GptTrainingSetup withDocumentMasking(DocumentMasking value) {
        return new GptTrainingSetup(model, attention, tensorParallel, pipelineParallel, virtualStages, expertParallel,
                contextParallel, optimizer, microBatchSize, globalBatchSize, seqLength, training, seed,
                deviceInitialization, dataloaderType, cudaGraph, lora, value, packedSamples);
    }

    /**
     * @param value whether the samples are rows of packed sequences ({@code --sft --packing})
     * @return the same setup with it
     */
    public GptTrainingSetup withPackedSamples(boolean value) {
        return new GptTrainingSetup(model, attention, tensorParallel, pipelineParallel, virtualStages, expertParallel,
                contextParallel, optimizer, microBatchSize, globalBatchSize, seqLength, training, seed,
                deviceInitialization, dataloaderType, cudaGraph, lora, documentMasking, value);
    }

    /**
     * @return whether micro-batches carry packed sequences, whose attention keeps them apart: packed samples, or
     *     documents separated by {@code --reset-attention-mask}
     */
    public boolean packedSequences() {
        return packedSamples || documentMasking.resetAttentionMask();
    }

    /** @return whether micro-batches carry their own position ids (packed sequences or {@code --reset-position-ids}) */
    public boolean positionIds() {
        return packedSequences() || documentMasking.resetPositionIds();
    }

    /**
     * @return the layer spec of this run: the attention kind's (for packed sequences when
     *     {@link #packedSequences()}), with {@link #lora()}'s adapters when set
     */
    public LayerSpec layerSpec() {
        LayerSpec spec = attention.layerSpec(model, packedSequences());
        return lora == null ? spec : spec.withLora(lora);
    }

    /**
     * A setup whose steps are all eager ({@link CudaGraphConfig#NONE}); the parameters are the canonical
     * constructor's.
     */
    public GptTrainingSetup(TransformerConfig model, AttentionBackend attention, int tensorParallel,
                            int pipelineParallel, int virtualStages, int expertParallel, int contextParallel,
                            OptimizerConfig optimizer, int microBatchSize, long globalBatchSize, int seqLength,
                            TrainingConfig training, long seed, boolean deviceInitialization, DataloaderType dataloaderType) {
        this(model, attention, tensorParallel, pipelineParallel, virtualStages, expertParallel, contextParallel, optimizer,
                microBatchSize, globalBatchSize, seqLength, training, seed, deviceInitialization, dataloaderType,
                CudaGraphConfig.NONE);
    }

    /**
     * A setup that reads its samples in order ({@link DataloaderType#SINGLE}, Megatron's default);
     * the parameters are the canonical constructor's.
     */
    public GptTrainingSetup(TransformerConfig model, AttentionBackend attention, int tensorParallel,
                            int pipelineParallel, int virtualStages, int expertParallel, int contextParallel,
                            OptimizerConfig optimizer, int microBatchSize, long globalBatchSize, int seqLength,
                            TrainingConfig training, long seed, boolean deviceInitialization) {
        this(model, attention, tensorParallel, pipelineParallel, virtualStages, expertParallel, contextParallel, optimizer,
                microBatchSize, globalBatchSize, seqLength, training, seed, deviceInitialization, DataloaderType.SINGLE);
    }

    private static void positive(String flag, long value) {
        if (value < 1) {
            throw new IllegalArgumentException(flag + " " + value + " must be at least 1");
        }
    }

    /**
     * The rank grid for a world of this size.
     *
     * @param worldSize ranks
     * @return the dims
     * @throws IllegalArgumentException naming the flags whose sizes do not divide the world, or a
     *         global batch that does not divide into micro-batches
     */
    public ParallelDims dims(int worldSize) {
        ParallelDims dims = ParallelDims.builder(worldSize).tensorParallel(tensorParallel).pipelineParallel(pipelineParallel)
                .virtualPipelineParallel(virtualStages).expertParallel(expertParallel).contextParallel(contextParallel)
                .hierarchicalContextParallelSizes(model.hierarchicalContextParallelSizes()).build();
        int dp = dims.dataParallel();
        if (globalBatchSize % ((long) microBatchSize * dp) != 0) {
            throw new IllegalArgumentException("--global-batch-size " + globalBatchSize + " is not divisible by"
                    + " --micro-batch-size " + microBatchSize + " x data-parallel size " + dp);
        }
        model.validate(dims, virtualStages > 1 ? model.numLayers() / (pipelineParallel * virtualStages) : 0);
        return dims;
    }
}
