package io.mcore4j.models.transformer;

import io.mcore4j.contextparallel.CpCommType;
import io.mcore4j.models.TransformerConfig;

import java.util.stream.IntStream;

/**
 * Which core attention a GPT's layers use (Megatron's {@code --attention-backend}). The fused
 * kinds run libtorch's {@code scaled_dot_product_attention} (flash or memory-efficient kernel on
 * CUDA, its math kernel on CPU) through {@link SdpaAttention}, and under context parallelism
 * ({@code --cp-comm-type p2p}) ring attention on the fused kernels that return their log-sum-exp, or
 * ({@code a2a}) the fused attention between two all-to-alls, or ({@code a2a+p2p}) the fused ring between them;
 * the unfused kinds compose the softmax attention from tensor ops ({@link DotProductAttention}),
 * under context parallelism for every {@code --cp-comm-type}.
 */
public enum AttentionBackend {
    /**
     * Fused where it computes the same thing (no attention dropout), unfused otherwise; under context
     * parallelism (decided per model context) fused for {@code --cp-comm-type p2p}, which runs as a
     * ring on the fused kernels, {@code a2a}, which attends whole sequences of fewer heads, and
     * {@code a2a+p2p}, the ring between all-to-alls; unfused
     * for {@code allgather}, which has no fused implementation.
     */
    AUTO,
    /** libtorch's fused attention (it picks the flash kernel where it can). */
    FLASH,
    /** libtorch's fused attention (the same module as {@link #FLASH}). */
    FUSED,
    /** Attention composed from matmul, mask and softmax. */
    UNFUSED,
    /** The same as {@link #UNFUSED} (Megatron's name for its local implementation). */
    LOCAL;

    /**
     * The layer spec this backend gives a model of this configuration.
     *
     * @param config the model configuration
     * @return the tensor-parallel layer spec with the chosen core attention
     * @throws IllegalArgumentException if a fused backend is asked for with attention dropout
     */
    public LayerSpec layerSpec(TransformerConfig config) {
        return layerSpec(config, false);
    }

    /**
     * The layer spec this backend gives a model of this configuration trained on data that may hold
     * packed sequences ({@link TokenPositions}). Without context parallelism every kind attends them
     * ({@link SdpaAttention} through variable-length flash attention on CUDA). {@link #AUTO} takes the
     * composed attention for them under context parallelism, whose ring and all-gather mask blocks per
     * sequence, and in a layer with a sliding window, whose block-diagonal mask it cuts to the window (the
     * fused modules have no packed windowed path); {@link #FLASH} and {@link #FUSED} are refused there
     * ({@link #checkPacked}).
     *
     * @param config the model configuration
     * @param packed whether micro-batches may carry packed sequences
     * @return the tensor-parallel layer spec with the chosen core attention
     * @throws IllegalArgumentException if a fused backend is asked for with attention dropout; the spec's
     *     factory throws where {@link #checkPacked} does
     */
    public LayerSpec layerSpec(TransformerConfig config, boolean packed) {
        boolean fused = isFused(config);
        if (fused && config.attentionDropout() > 0) {
            throw new IllegalArgumentException("--attention-backend " + name().toLowerCase(java.util.Locale.ROOT)
                    + " has no attention dropout; --attention-dropout is " + config.attentionDropout()
                    + " (use --attention-backend unfused or auto)");
        }
        if (packed && fused) {
            return LayerSpec.tensorParallel().withCoreAttention((ctx, layer) -> {
                boolean cp = ctx.groups().cp().size() > 1;
                if (this == AUTO && (cp || ctx.config().windowSize(layer) >= 0)) {
                    return DotProductAttention.forLayer(ctx, layer);
                }
                checkPacked(ctx.config(), ctx.groups().cp().size());
                return SdpaAttention.forLayer(ctx, layer);
            });
        }
        if (this == AUTO && fused) {
            // under context parallelism auto takes the fused kernels (p2p's ring, a2a, a2a+p2p) unless the comm type is
            // allgather, whose attention is composed
            return LayerSpec.tensorParallel().withCoreAttention(
                    (ctx, layer) -> ctx.groups().cp().size() > 1 && !fusedUnderContextParallel(ctx.config())
                            ? DotProductAttention.forLayer(ctx, layer) : SdpaAttention.forLayer(ctx, layer));
        }
        return fused ? LayerSpec.tensorParallel().withCoreAttention(SdpaAttention::forLayer) : LayerSpec.tensorParallel();
    }


    /**
     * Refuses a layout whose attention has no path for packed sequences: a fused backend named
     * explicitly ({@link #FLASH}, {@link #FUSED}) under context parallelism with {@code --cp-comm-type p2p}
     * (or {@code a2a+p2p} with a ring of more than one rank) runs a fused ring, which masks no sequence boundary,
     * and in a model with sliding-window layers runs fused modules that have no window over packed sequences.
     *
     * @param config the model configuration
     * @param contextParallel the context-parallel size
     * @throws IllegalArgumentException naming the backend and what to use instead
     */
    public void checkPacked(TransformerConfig config, int contextParallel) {
        if (this == AUTO || !isFused(config)) {
            return;
        }
        String backend = "--attention-backend " + name().toLowerCase(java.util.Locale.ROOT);
        boolean ring = config.cpCommType() == CpCommType.P2P
                || config.cpCommType() == CpCommType.A2A_P2P && config.hierarchicalContextParallelSizes().get(1) > 1;
        if (contextParallel > 1 && ring) {
            throw new IllegalArgumentException(backend + " under context parallelism runs a fused ring, which has no packed"
                    + " path; packed sequences need --attention-backend unfused (or auto)");
        }
        if (IntStream.range(0, config.numLayers()).anyMatch(layer -> config.windowSize(layer) >= 0)) {
            throw new IllegalArgumentException(backend + " has no packed path for sliding-window layers; packed sequences"
                    + " with a window need --attention-backend unfused (or auto)");
        }
    }

    /**
     * @param config the model configuration
     * @return whether this backend runs libtorch's fused attention for that configuration
     */
    public boolean isFused(TransformerConfig config) {
        return switch (this) {
            case AUTO -> config.attentionDropout() == 0;
            case FLASH, FUSED -> true;
            case UNFUSED, LOCAL -> false;
        };
    }

    /**
     * Whether this backend's attention runs on the fused kernels under context parallelism (the ring of
     * {@code p2p} and {@code a2a+p2p}, or {@code a2a}'s whole-sequence attention); {@code allgather} is always
     * composed.
     *
     * @param config the model configuration (its {@code cpCommType} and attention dropout)
     * @return whether the attention is fused at a context-parallel size above 1
     */
    public boolean fusedUnderContextParallel(TransformerConfig config) {
        return isFused(config) && config.cpCommType() != CpCommType.ALL_GATHER;
    }
}
