package io.mcore4j.training.gpt;

import io.mcore4j.core.fp8.Fp8Scaling;
import io.mcore4j.models.transformer.TransformerLayer;
import io.mcore4j.moe.MoeAuxLossTracker;
import io.mcore4j.moe.TopKRouter;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.AbstractModule;
import io.mcore4j.core.nn.ForwardPreHook;
import io.mcore4j.core.nn.GradientReadyListener;
import io.mcore4j.core.nn.ParameterResidency;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.hf.HfCheckpointException;
import io.mcore4j.hf.HfConfig;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.models.transformer.TokenPositions;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.pipeline.LayerAssignment;
import io.mcore4j.tensorparallel.LoraLinear;
import io.mcore4j.training.MicroBatch;
import io.mcore4j.training.TrainingModel;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * This rank's chunks of a GPT: one per virtual pipeline stage, with the layers
 * {@link LayerAssignment#even} gives this pipeline stage. The first chunk of the first stage embeds
 * the tokens; the last chunk of the last stage returns the mean cross-entropy over the labels
 * (weighted by the micro-batch's loss mask when it has one, see {@link GptModel#forward(AutogradScope,
 * NDArray, NDArray, NDArray, NDArray)}). The chunks are its children under the model's global keys
 * ({@code embedding.*}, {@code decoder.layers.<n>.*}, ...).
 */
public final class GptTrainingModel extends AbstractModule implements TrainingModel {
    private static final Logger LOG = LoggerFactory.getLogger(GptTrainingModel.class);
    private final ModelContext ctx;
    private final List<GptModel> chunks;
    private final MoeAuxLossTracker auxLosses;
    private final int moeLayers;
    /** Multi-token prediction's per-depth losses for logging, or null without it. */
    private final MoeAuxLossTracker mtpLosses;
    /** Whether micro-batches carry position ids or packed sequences, which every chunk's layers read. */
    private final boolean everyChunkReadsData;
    /** The FP8 scaling state of this rank's chunks, or null without FP8. */
    private final Fp8Scaling fp8;

    private GptTrainingModel(ModelContext ctx, List<GptModel> chunks, boolean everyChunkReadsData, Fp8Scaling fp8) {
        this.ctx = ctx;
        this.fp8 = fp8;
        this.everyChunkReadsData = everyChunkReadsData;
        this.chunks = List.copyOf(chunks);
        for (GptModel m : this.chunks) {
            registerModule("", m);
        }
        TransformerConfig c = ctx.config();
        int count = c.moe() == null ? 0 : c.moe().layers().count(c.numLayers());
        this.moeLayers = count;
        this.auxLosses = count > 0 ? new MoeAuxLossTracker(ctx.parameters()) : null;
        if (auxLosses != null) {
            TopKRouter.expectAuxLosses(auxLosses, c.moe().config(), c.numLayers());
            for (GptModel m : this.chunks) {
                for (TransformerLayer layer : m.layers()) {
                    if (layer.moe() != null) {
                        // Megatron numbers layers from 1
                        layer.moe().router().trackAuxLosses(auxLosses, layer.layerNumber() + 1, c.numLayers());
                    }
                }
            }
        }
        this.mtpLosses = c.mtp() == null ? null : new MoeAuxLossTracker(ctx.parameters());
        if (mtpLosses != null) {
            for (GptModel m : this.chunks) {
                if (m.mtp() != null) {
                    m.mtp().trackLosses(mtpLosses);
                }
            }
        }
    }

    /**
     * Builds this rank's chunks.
     *
     * @param ctx the model's configuration, groups, parameter manager and seeds
     * @param spec which modules make a layer (attention kind, parallel linears)
     * @param virtualStages chunks per pipeline rank (1 without interleaving)
     * @return the model
     * @throws IllegalArgumentException if the layers do not divide among the stages
     */
    public static GptTrainingModel build(ModelContext ctx, LayerSpec spec, int virtualStages) {
        return build(ctx, spec, virtualStages, false);
    }

    /**
     * Builds this rank's chunks for micro-batches that may carry position ids or packed sequences
     * ({@link MicroBatch#positionIds()}, {@link MicroBatch#packed()}): then every chunk reads the
     * micro-batch, since the layers of every pipeline stage read them, as Megatron hands
     * {@code packed_seq_params} to every stage.
     *
     * @param ctx the model's configuration, groups, parameter manager and seeds
     * @param spec which modules make a layer (attention kind, parallel linears)
     * @param virtualStages chunks per pipeline rank (1 without interleaving)
     * @param positionsFromData whether micro-batches may carry position ids or packed sequences
     * @return the model
     * @throws IllegalArgumentException if the layers do not divide among the stages
     */
    public static GptTrainingModel build(ModelContext ctx, LayerSpec spec, int virtualStages, boolean positionsFromData) {
        // one scaling state for every chunk of this rank, its slots named by the linears' global keys
        Fp8Scaling fp8 = ctx.config().fp8() == null ? null : new Fp8Scaling(ctx.config().fp8(), ctx.parameters());
        try {
            return build(ctx, fp8 == null ? spec : spec.withFp8(fp8), virtualStages, positionsFromData, fp8);
        } catch (RuntimeException e) {
            if (fp8 != null) {
                fp8.close();
            }
            throw e;
        }
    }

    private static GptTrainingModel build(ModelContext ctx, LayerSpec spec, int virtualStages, boolean positionsFromData,
                                          Fp8Scaling fp8) {
        ProcessGroups groups = ctx.groups();
        int pp = groups.dims().pipelineParallel();
        LayerAssignment layers = LayerAssignment.even(ctx.config().numLayers(), pp, virtualStages);
        int stage = groups.pipelineRank();
        List<GptModel> chunks = new ArrayList<>();
        for (int c = 0; c < virtualStages; c++) {
            chunks.add(GptModel.build(ctx, spec, layers.layers(stage, c), stage == 0 && c == 0,
                    stage == pp - 1 && c == virtualStages - 1));
        }
        return new GptTrainingModel(ctx, chunks, positionsFromData, fp8);
    }

    /**
     * Freezes every parameter that is not a LoRA adapter's ({@link LoraLinear#isAdapterKey}): the
     * base weights then get no gradient, and a {@link io.mcore4j.training.TrainStep} built afterwards
     * gives them no optimizer state and leaves them out of checkpoints.
     *
     * @return the number of parameters frozen on this rank
     */
    public int freezeBaseWeights() {
        int frozen = 0;
        for (Map.Entry<String, Parameter> e : namedParameters("").entrySet()) {
            if (!LoraLinear.isAdapterKey(e.getKey())) {
                e.getValue().freeze();
                frozen++;
            }
        }
        return frozen;
    }

    /** @return the chunks, in virtual-stage order */
    public List<GptModel> chunks() {
        return Collections.unmodifiableList(chunks);
    }

    /** @return the configuration the chunks were built from */
    public TransformerConfig config() {
        return ctx.config();
    }

    @Override
    public int numChunks() {
        return chunks.size();
    }

    @Override
    public boolean readsData(int chunk) {
        GptModel m = chunks.get(chunk);
        return everyChunkReadsData || m.isPreProcess() || m.isPostProcess();
    }

    @Override
    public NDArray forward(AutogradScope scope, int chunk, NDArray input, MicroBatch batch) {
        GptModel m = chunks.get(chunk);
        return m.forward(scope, m.isPreProcess() ? batch.tokens() : null, input, m.isPostProcess() ? batch.labels() : null,
                m.isPostProcess() ? batch.lossMask() : null, new TokenPositions(batch.positionIds(), batch.packed()));
    }

    @Override
    public List<Parameter> sharedEmbeddingParameters() {
        List<Parameter> out = new ArrayList<>();
        for (GptModel m : chunks) {
            out.addAll(m.sharedEmbeddingParameters());
        }
        return out;
    }

    @Override
    public Shape activationShape(int microBatchSize, int seqLength) {
        TransformerConfig c = ctx.config();
        // this rank's part of the sequence under context parallelism, split again over TP with SP
        long local = seqLength / ctx.groups().dims().contextParallel();
        if (c.sequenceParallel()) {
            local /= ctx.groups().dims().tensorParallel();
        }
        return new Shape(local, microBatchSize, c.hiddenSize());
    }

    @Override
    public DataType activationDtype() {
        return ctx.config().dtype();
    }

    @Override
    public void setAuxLossScale(double scale) {
        ctx.auxLossScale().set(scale);
    }

    @Override
    public void addGradientReadyListener(GradientReadyListener listener) {
        for (GptModel m : chunks) {
            m.addGradientReadyListener(listener);
        }
    }

    @Override
    public boolean addForwardPreHook(ForwardPreHook hook) {
        for (GptModel m : chunks) {
            m.addForwardPreHook(hook);
        }
        return true;
    }

    @Override
    public boolean addParameterResidency(ParameterResidency residency) {
        for (GptModel m : chunks) {
            m.addParameterResidency(residency);
        }
        return true;
    }

    @Override
    public void finishStep() {
        for (GptModel m : chunks) {
            m.finishStep();
        }
    }

    /**
     * Reports the routers' auxiliary losses over the MoE layers of the whole model, then multi-token prediction's
     * per-depth losses ({@code "mtp_<k> loss"}, averaged over data-parallel ranks, as Megatron logs them)
     * (collective).
     */
    @Override
    public MoeAuxLossTracker.Report reportAuxLosses(double lossScale) {
        MoeAuxLossTracker.Report moe = auxLosses == null ? TrainingModel.super.reportAuxLosses(lossScale)
                : auxLosses.report(lossScale, moeLayers, ctx.groups());
        if (mtpLosses == null) {
            return moe;
        }
        // each depth's loss is its own entry of one "layer": the report's average over 1 layer is the value
        MoeAuxLossTracker.Report mtp = mtpLosses.report(lossScale, 1, ctx.groups());
        Map<String, Double> averages = new LinkedHashMap<>(moe.averages());
        averages.putAll(mtp.averages());
        return new MoeAuxLossTracker.Report(averages, moe.perLayer());
    }

    @Override
    public Fp8Scaling fp8Scaling() {
        return fp8;
    }

    @Override
    public double flopsPerToken(int seqLength) {
        return ctx.config().flopsPerToken(seqLength);
    }

    /**
     * The model as a Hugging Face config ({@link HfConfig#CHECKPOINT_KEY}, with the padded vocabulary as its
     * {@code vocab_size} and as {@link HfConfig#PADDED_VOCAB_KEY}), where one of the architectures mcore4j maps
     * describes it: {@code generate-gpt --load} and {@code export-hf} then rebuild every option (windows, norms,
     * scales, experts) that no tensor shape records. A model no architecture describes records nothing, and its
     * readers fall back to the shapes.
     */
    @Override
    public Map<String, Object> checkpointMetadata() {
        TransformerConfig config = ctx.config();
        HfConfig hf;
        try {
            hf = HfConfig.forModel(config, config.vocabSize());
        } catch (HfCheckpointException noArchitecture) {
            LOG.debug("no Hugging Face architecture describes the model; its checkpoint records shapes only: {}",
                    noArchitecture.getMessage());
            return Map.of();
        }
        return hf.checkpointEntries(config.vocabSize());
    }

    @Override
    public void close() {
        super.close();
        if (auxLosses != null) {
            auxLosses.close();
        }
        if (mtpLosses != null) {
            mtpLosses.close();
        }
        if (fp8 != null) {
            fp8.close();
        }
    }
}
