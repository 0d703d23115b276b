package io.mcore4j.models.transformer;

import io.mcore4j.core.fp8.Fp8Scaling;
import io.mcore4j.tensorparallel.ColumnParallelLinear;
import io.mcore4j.tensorparallel.Initializers;
import io.mcore4j.tensorparallel.LoraLinear;
import io.mcore4j.tensorparallel.ParallelLinear;
import io.mcore4j.tensorparallel.RowParallelLinear;

/**
 * Which implementation each part of a transformer layer uses. The model code only asks for
 * "linear_qkv" or "linear_fc2"; this spec decides that they are column- and row-parallel.
 *
 * @param linearQkv the fused query/key/value projection
 * @param linearProj the attention output projection
 * @param linearFc1 the first MLP linear (fused gate and up for SwiGLU)
 * @param linearFc2 the second MLP linear
 * @param coreAttention attention over projected queries, keys and values
 * @param fp8 the model's FP8 scaling state, which the four linears of the layers that the config's
 *     {@link io.mcore4j.core.fp8.Fp8Config#fp8Layer} puts in FP8 register with ({@link #fp8For}); null for none
 */
public record LayerSpec(LinearFactory linearQkv, LinearFactory linearProj, LinearFactory linearFc1,
                        LinearFactory linearFc2, CoreAttention.Factory coreAttention, Fp8Scaling fp8) {

    /** Builds a linear layer. */
    @FunctionalInterface
    public interface LinearFactory {
        /**
         * @param ctx the model context
         * @param key checkpoint key prefix of the layer (used for initialisation seeds)
         * @param settings sizes and options
         * @return the layer
         */
        ParallelLinear create(ModelContext ctx, String key, LinearSettings settings);
    }

    /**
     * Sizes and options of one linear.
     *
     * @param inputSize input features
     * @param outputSize output features
     * @param bias whether it has a bias
     * @param skipBiasAdd return the bias instead of adding it
     * @param initStd std of its normal initialisation
     * @param stride partition stride (2 for fused GLU weights)
     * @param fp8 the scaling state the linear's GEMMs run in FP8 with, or null for the parameter dtype
     */
    public record LinearSettings(int inputSize, int outputSize, boolean bias, boolean skipBiasAdd, double initStd, int stride,
                                 Fp8Scaling fp8) {}

    /**
     * @return Megatron's local spec: column-parallel QKV and FC1, row-parallel projection and FC2, attention
     *     from DJL ops. With {@link io.mcore4j.models.TransformerConfig#tpCommOverlap()} the four linears
     *     overlap their sequence-parallel collectives with their GEMMs (the one place that choice is made;
     *     the output layer and the experts keep the composed collectives, as in Megatron-Core)
     */
    public static LayerSpec tensorParallel() {
        return new LayerSpec(LayerSpec::column, LayerSpec::row, LayerSpec::column, LayerSpec::row, DotProductAttention::forLayer,
                null);
    }

    /**
     * The same spec with FP8 GEMMs in the layers' four linears, those of the layers the config's FP8 settings
     * leave in the parameter dtype ({@code --first-last-layers-bf16}) excepted; LoRA adapters stay in it.
     *
     * @param scaling the model's scaling state
     * @return a new spec
     */
    public LayerSpec withFp8(Fp8Scaling scaling) {
        return new LayerSpec(linearQkv, linearProj, linearFc1, linearFc2, coreAttention, scaling);
    }

    /**
     * @param config the model's config
     * @param layerNumber a global layer index, from 0
     * @return the scaling state that layer's linears run in FP8 with, or null for none
     */
    public Fp8Scaling fp8For(io.mcore4j.models.TransformerConfig config, int layerNumber) {
        return fp8 != null && config.fp8() != null && config.fp8().fp8Layer(layerNumber, config.numLayers()) ? fp8 : null;
    }

    /**
     * The same spec with another core attention, e.g. {@code SdpaAttention::forLayer} for libtorch's
     * fused kernels.
     *
     * @param factory the core attention
     * @return a new spec
     */
    public LayerSpec withCoreAttention(CoreAttention.Factory factory) {
        return new LayerSpec(linearQkv, linearProj, linearFc1, linearFc2, factory, fp8);
    }

    /**
     * The same spec with LoRA adapters ({@link LoraLinear}) around the linears {@code lora} targets:
     * the one place where a layer gets adapters. {@code A} is kaiming-uniform, seeded by its key
     * ({@code <linear>.adapter.linear_in.weight}, so identical at every layout), {@code B} zeros.
     * The adapters' input dropout draws from the model's generator of the input's region: the hidden
     * one for column-parallel linears (replicated over tensor-parallel ranks, or per rank with
     * sequence parallelism) and the per-rank one for row-parallel linears, whose input is split.
     *
     * @param lora the adapters' settings
     * @return a new spec
     */
    public LayerSpec withLora(LoraConfig lora) {
        return new LayerSpec(
                lora.targets(LoraConfig.Target.LINEAR_QKV) ? adapted(linearQkv, lora, true) : linearQkv,
                lora.targets(LoraConfig.Target.LINEAR_PROJ) ? adapted(linearProj, lora, false) : linearProj,
                lora.targets(LoraConfig.Target.LINEAR_FC1) ? adapted(linearFc1, lora, true) : linearFc1,
                lora.targets(LoraConfig.Target.LINEAR_FC2) ? adapted(linearFc2, lora, false) : linearFc2,
                coreAttention, fp8);
    }

    private static LinearFactory adapted(LinearFactory base, LoraConfig lora, boolean replicatedInput) {
        return (ctx, key, s) -> {
            ParallelLinear linear = base.create(ctx, key, s);
            double p = lora.dropout();
            LoraLinear.InputDropout dropout = p == 0 ? LoraLinear.InputDropout.NONE
                    : (scope, x) -> Dropout.apply(scope, x, p,
                            replicatedInput ? ctx.hiddenDropout() : ctx.attentionDropout());
            try {
                return LoraLinear.builder(linear).rank(lora.dim()).alpha(lora.alpha()).dropout(dropout)
                        .initializer(Initializers.kaimingUniform(ctx.initSeed(key + LoraLinear.LINEAR_IN)))
                        .manager(ctx.parameters()).name(key + "lora").build();
            } catch (RuntimeException e) {
                linear.close();
                throw e;
            }
        };
    }

    private static ParallelLinear column(ModelContext ctx, String key, LinearSettings s) {
        return ColumnParallelLinear.builder(s.inputSize(), s.outputSize(), ctx.groups().tp())
                .bias(s.bias()).skipBiasAdd(s.skipBiasAdd()).gatherOutput(false)
                .sequenceParallel(ctx.config().sequenceParallel()).tpCommOverlap(ctx.config().tpCommOverlap())
                .gradientAccumulationFusion(ctx.config().gradientAccumulationFusion())
                .initializer(ctx.initializer(key + "weight", s.initStd()))
                .stride(s.stride()).fp8(s.fp8()).dtype(ctx.config().dtype()).manager(ctx.parameters()).name(key).build();
    }

    private static ParallelLinear row(ModelContext ctx, String key, LinearSettings s) {
        return RowParallelLinear.builder(s.inputSize(), s.outputSize(), ctx.groups().tp())
                .bias(s.bias()).skipBiasAdd(s.skipBiasAdd()).inputIsParallel(true)
                .sequenceParallel(ctx.config().sequenceParallel()).tpCommOverlap(ctx.config().tpCommOverlap())
                .gradientAccumulationFusion(ctx.config().gradientAccumulationFusion())
                .initializer(ctx.initializer(key + "weight", s.initStd()))
                .fp8(s.fp8()).dtype(ctx.config().dtype()).manager(ctx.parameters()).name(key).build();
    }
}
